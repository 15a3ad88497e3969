//! Raw IPv4 sockets for a measurement tool that writes its own packets:
//! [`RawIpSockets`] sends whole IPv4 packets as built (`IPPROTO_RAW`, the
//! header included: fragments, TTLs, identifications stay as given), each
//! carrying a firewall mark so that a rule can tell them from the kernel's
//! own; and receives the TCP and ICMP packets arriving at this host (after
//! the kernel's reassembly). Needs CAP_NET_RAW (and CAP_NET_ADMIN for the
//! mark).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The send socket and the two receive sockets.
#[derive(Debug)]
pub struct RawIpSockets {
    send: OwnedFd,
    tcp: OwnedFd,
    icmp: OwnedFd,
}

fn raw_socket(protocol: i32, nonblock: bool) -> io::Result<OwnedFd> {
    let ty = libc::SOCK_RAW | libc::SOCK_CLOEXEC | if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, ty, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_int(fd: &OwnedFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: a c_int option value of the right size.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, (&v as *const i32).cast(), std::mem::size_of::<i32>() as u32)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl RawIpSockets {
    /// Opens them; every packet sent carries `mark` (`SO_MARK`).
    pub fn open(mark: u32) -> io::Result<RawIpSockets> {
        let send = raw_socket(libc::IPPROTO_RAW, false)?;
        set_int(&send, libc::SOL_SOCKET, libc::SO_MARK, mark as i32)?;
        let tcp = raw_socket(libc::IPPROTO_TCP, true)?;
        let icmp = raw_socket(libc::IPPROTO_ICMP, true)?;
        for s in [&tcp, &icmp] {
            // Best effort: a burst of answers must not overflow the default.
            let _ = set_int(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20);
        }
        Ok(RawIpSockets { send, tcp, icmp })
    }

    /// Sends one whole IPv4 packet (header included) to its destination.
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        if packet.len() < 20 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "shorter than an IPv4 header"));
        }
        let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
        // SAFETY: an all-zero sockaddr_in is valid; we fill family and address.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as u16;
        sa.sin_addr.s_addr = u32::from_ne_bytes(dst.octets());
        // SAFETY: buffer and address are valid for the call.
        let r = unsafe {
            libc::sendto(
                self.send.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Waits until a packet can be read or `timeout` (at most 1 s) passes.
    pub fn wait(&self, timeout: Duration) {
        let mut fds = [
            libc::pollfd { fd: self.tcp.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.icmp.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let ms = timeout.as_millis().min(1000) as i32;
        // SAFETY: two valid pollfd entries.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    }

    /// The next TCP packet that arrived (whole IPv4 packet), if any.
    pub fn recv_tcp(&self, buf: &mut [u8]) -> Option<usize> {
        recv(&self.tcp, buf)
    }

    /// The next ICMP packet that arrived (whole IPv4 packet), if any.
    pub fn recv_icmp(&self, buf: &mut [u8]) -> Option<usize> {
        recv(&self.icmp, buf)
    }
}

fn recv(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: buf is valid for writes of its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    (n > 0).then_some(n as usize)
}
