//! Routes with an MTU from one kernel routing table, over rtnetlink: what
//! the gateway's iMTU follower reads (issue 30), and the forwarding table
//! it checks them against (issue 35: [`dump_all`]). A routing daemon (BIRD's
//! `krt_mtu`) writes each neighbour b-network's advertised iMTU as the
//! `mtu` metric (`RTAX_MTU`) of its prefix in a table of its own;
//! [`dump_table`] lists those routes, and a [`RouteMonitor`] wakes the
//! caller when any route changes so that it dumps again.
//!
//! Why a dump after each event rather than applying events one by one: the
//! dump is the whole truth at one moment (no event can be missed or
//! applied out of order, the socket's buffer may overflow under a full
//! table churn without losing anything), and an iMTU table is small.
//!
//! The parser ([`parse_routes`]) is plain code over bytes, unit-tested on
//! hand-made messages; only [`dump_table`] and [`RouteMonitor`] touch the
//! kernel. IPv4 and IPv6.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

const NLMSG_HDR: usize = 16;
const RTMSG_LEN: usize = 12;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_GATEWAY: u16 = 5;
const RTA_METRICS: u16 = 8;
const RTA_TABLE: u16 = 15;
const RTAX_MTU: u16 = 2;
const RTMGRP_IPV4_ROUTE: u32 = 0x40;
const RTMGRP_IPV6_ROUTE: u32 = 0x400;

/// Why routes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// A netlink socket call failed.
    #[error("rtnetlink {step}: {source}")]
    Socket {
        /// What was being done.
        step: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The kernel answered the dump with an error.
    #[error("rtnetlink dump refused: {0}")]
    Refused(io::Error),
    /// A message did not parse (truncated, bad lengths).
    #[error("rtnetlink: malformed message at byte {0}")]
    Malformed(usize),
}

/// One route of the table that carries an MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtuRoute {
    /// Destination prefix address.
    pub dst: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// The `mtu` metric.
    pub mtu: u32,
    /// The next hop, if the route has one.
    pub gateway: Option<IpAddr>,
}

fn addr(family: u8, b: &[u8]) -> Option<IpAddr> {
    match (i32::from(family), b.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        (libc::AF_INET6, 16) => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?))),
        _ => None,
    }
}

/// Attributes `(type, value)` in `b` (rtattr: length, type, value, padded
/// to 4); `Err(offset)` at a bad length.
fn attrs(b: &[u8], base: usize) -> Result<Vec<(u16, &[u8])>, usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= b.len() {
        let len = usize::from(u16::from_ne_bytes([b[i], b[i + 1]]));
        let ty = u16::from_ne_bytes([b[i + 2], b[i + 3]]) & 0x3fff;
        if len < 4 || i + len > b.len() {
            return Err(base + i);
        }
        out.push((ty, &b[i + 4..i + len]));
        i += (len + 3) & !3;
    }
    Ok(out)
}

/// Which routes of a table a dump keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Those that carry an `mtu` metric (an iMTU table).
    WithMtu,
    /// All of them (a forwarding table; `mtu` 0 where there is none).
    All,
}

/// Parses a buffer of netlink messages from a route dump, adding the
/// routes of `table` that `keep` names to `out`. Returns `Ok(true)` at the
/// end of the dump (`NLMSG_DONE`).
pub fn parse_routes(buf: &[u8], table: u32, keep: Keep, out: &mut Vec<MtuRoute>) -> Result<bool, RouteError> {
    let mut at = 0;
    while at + NLMSG_HDR <= buf.len() {
        let h = &buf[at..];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let ty = u16::from_ne_bytes([h[4], h[5]]);
        if len < NLMSG_HDR || at + len > buf.len() {
            return Err(RouteError::Malformed(at));
        }
        let body = &buf[at + NLMSG_HDR..at + len];
        match ty {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = body.get(..4).map_or(0, |e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                if errno != 0 {
                    return Err(RouteError::Refused(io::Error::from_raw_os_error(-errno)));
                }
            }
            RTM_NEWROUTE if body.len() >= RTMSG_LEN => {
                let (family, dst_len, rtm_table) = (body[0], body[1], body[4]);
                let mut r = MtuRoute {
                    dst: if i32::from(family) == libc::AF_INET6 {
                        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    } else {
                        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                    },
                    len: dst_len,
                    mtu: 0,
                    gateway: None,
                };
                let mut tbl = u32::from(rtm_table);
                for (t, v) in attrs(&body[RTMSG_LEN..], at + NLMSG_HDR + RTMSG_LEN).map_err(RouteError::Malformed)? {
                    match t {
                        RTA_DST => r.dst = addr(family, v).ok_or(RouteError::Malformed(at))?,
                        RTA_GATEWAY => r.gateway = addr(family, v),
                        RTA_TABLE if v.len() == 4 => tbl = u32::from_ne_bytes([v[0], v[1], v[2], v[3]]),
                        RTA_METRICS => {
                            for (m, mv) in attrs(v, at).map_err(RouteError::Malformed)? {
                                if m == RTAX_MTU && mv.len() == 4 {
                                    r.mtu = u32::from_ne_bytes([mv[0], mv[1], mv[2], mv[3]]);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                if tbl == table && (r.mtu != 0 || keep == Keep::All) {
                    out.push(r);
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Ok(false)
}

fn socket(groups: u32) -> Result<OwnedFd, RouteError> {
    // SAFETY: socket(2) with constant arguments; the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
    if fd < 0 {
        return Err(RouteError::Socket { step: "socket", source: io::Error::last_os_error() });
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_nl is valid; family and groups set below.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = groups;
    // SAFETY: `sa` is a live sockaddr_nl and its size is passed.
    let r = unsafe {
        libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t)
    };
    if r != 0 {
        return Err(RouteError::Socket { step: "bind", source: io::Error::last_os_error() });
    }
    Ok(fd)
}

fn recv(fd: &OwnedFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// The routes of kernel table `table` (IPv4 and IPv6) that carry an `mtu`
/// metric, in the calling thread's network namespace.
pub fn dump_table(table: u32) -> Result<Vec<MtuRoute>, RouteError> {
    dump(table, Keep::WithMtu)
}

/// Every route of kernel table `table` (IPv4 and IPv6), in the calling
/// thread's network namespace: what the forwarding decision chooses from.
pub fn dump_all(table: u32) -> Result<Vec<MtuRoute>, RouteError> {
    dump(table, Keep::All)
}

fn dump(table: u32, keep: Keep) -> Result<Vec<MtuRoute>, RouteError> {
    let fd = socket(0)?;
    let mut req = [0u8; NLMSG_HDR + RTMSG_LEN];
    req[0..4].copy_from_slice(&((NLMSG_HDR + RTMSG_LEN) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETROUTE.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // rtmsg: family AF_UNSPEC (both), the rest zero; the kernel dumps
    // every table and the parser keeps `table`.
    // SAFETY: `req` is valid for reads of its length.
    let n = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if n < 0 {
        return Err(RouteError::Socket { step: "send", source: io::Error::last_os_error() });
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        let n = recv(&fd, &mut buf, 0).map_err(|source| RouteError::Socket { step: "recv", source })?;
        if n == 0 || parse_routes(&buf[..n], table, keep, &mut out)? {
            return Ok(out);
        }
    }
}

/// A netlink socket subscribed to IPv4 and IPv6 route changes.
#[derive(Debug)]
pub struct RouteMonitor {
    fd: OwnedFd,
}

impl RouteMonitor {
    /// Subscribes in the calling thread's network namespace.
    pub fn open() -> Result<RouteMonitor, RouteError> {
        Ok(RouteMonitor { fd: socket(RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE)? })
    }

    /// Waits up to `timeout` for route changes; `true` if any came (all
    /// pending notifications are read). An overflowed socket buffer
    /// (`ENOBUFS`) also counts as a change: the caller dumps anyway.
    pub fn wait(&self, timeout: Duration) -> Result<bool, RouteError> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one live pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(RouteError::Socket { step: "poll", source: e });
        }
        if r == 0 {
            return Ok(false);
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match recv(&self.fd, &mut buf, libc::MSG_DONTWAIT) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(source) => return Err(RouteError::Socket { step: "recv", source }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtattr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn newroute(family: i32, dst: &[u8], len: u8, table: u32, mtu: Option<u32>) -> Vec<u8> {
        let mut body = vec![family as u8, len, 0, 0, table.min(252) as u8, 12, 0, 1, 0, 0, 0, 0];
        body.extend(rtattr(RTA_TABLE, &table.to_ne_bytes()));
        body.extend(rtattr(RTA_DST, dst));
        if let Some(m) = mtu {
            body.extend(rtattr(RTA_METRICS, &rtattr(RTAX_MTU, &m.to_ne_bytes())));
        }
        let mut h = Vec::new();
        h.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        h.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        h.extend_from_slice(&[0u8; 10]);
        h.extend(body);
        h
    }

    fn done() -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&20u32.to_ne_bytes());
        h.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        h.extend_from_slice(&[0u8; 14]);
        h
    }

    #[test]
    fn routes_of_the_table_with_an_mtu_are_kept() {
        let v6: [u8; 16] = "2001:db8:2::".parse::<Ipv6Addr>().unwrap().octets();
        let mut buf = newroute(libc::AF_INET, &[203, 0, 113, 64], 26, 30, Some(9000));
        buf.extend(newroute(libc::AF_INET, &[203, 0, 113, 128], 26, 30, None));
        buf.extend(newroute(libc::AF_INET, &[198, 51, 100, 0], 24, 254, Some(1500)));
        buf.extend(newroute(libc::AF_INET6, &v6, 48, 30, Some(9000)));
        let mut out = Vec::new();
        assert!(!parse_routes(&buf, 30, Keep::WithMtu, &mut out).unwrap());
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], MtuRoute { dst: "203.0.113.64".parse().unwrap(), len: 26, mtu: 9000, gateway: None });
        assert_eq!(out[1].dst, "2001:db8:2::".parse::<IpAddr>().unwrap());
        assert!(parse_routes(&done(), 30, Keep::WithMtu, &mut out).unwrap());
        // A forwarding table: every route of it, with or without an MTU.
        let mut all = Vec::new();
        assert!(!parse_routes(&buf, 30, Keep::All, &mut all).unwrap());
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!((all[1].dst, all[1].mtu), ("203.0.113.128".parse().unwrap(), 0));
    }

    #[test]
    fn truncated_messages_are_errors_not_panics() {
        let buf = newroute(libc::AF_INET, &[203, 0, 113, 64], 26, 30, Some(9000));
        for cut in 1..buf.len() {
            let mut out = Vec::new();
            let _ = parse_routes(&buf[..cut], 30, Keep::All, &mut out);
        }
        let mut bad = buf.clone();
        bad[NLMSG_HDR + RTMSG_LEN] = 200; // an attribute longer than the message
        assert!(matches!(parse_routes(&bad, 30, Keep::WithMtu, &mut Vec::new()), Err(RouteError::Malformed(_))));
    }
}
