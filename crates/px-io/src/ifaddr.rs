//! Which local interface a UDP socket uses, and its MTU: the interface that
//! holds an address (`getifaddrs`) or has an index (`if_indextoname`). The
//! MTU itself comes from [`crate::iface::mtu`] (`SIOCGIFMTU`).
//!
//! Unprivileged; names resolve in the calling thread's network namespace.

use std::io;
use std::net::IpAddr;

use crate::iface::{self, IfaceError};

/// `io::Error` of an interface lookup, keeping the OS error when there is one.
fn io_error(e: IfaceError) -> io::Error {
    match e {
        IfaceError::Os { source, .. } => source,
        e @ IfaceError::Name(_) => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
    }
}

fn name_mtu(name: &[u8]) -> io::Result<u32> {
    let name = std::str::from_utf8(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "interface name is not UTF-8"))?;
    iface::mtu(name).map_err(io_error)
}

/// MTU of the local interface that holds `addr` (the source address the
/// kernel chose for a route), found with `getifaddrs` and `SIOCGIFMTU`.
/// `Ok(None)` if no interface holds it.
pub fn interface_mtu_of(addr: IpAddr) -> io::Result<Option<u32>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    if unsafe { libc::getifaddrs(&raw mut head) } < 0 {
        return Err(io::Error::last_os_error());
    }
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
        Some(n) => name_mtu(&n).map(Some),
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
    name_mtu(&n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn loopback_mtu_by_address_and_index() {
        let lo = interface_mtu_of(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap().unwrap();
        assert!(lo >= 1280);
        assert_eq!(ifindex_mtu(iface::ifindex("lo").unwrap()).unwrap(), lo);
        // 198.51.100.250 is on no interface of the test's namespace.
        assert_eq!(interface_mtu_of(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 250))).unwrap(), None);
    }
}
