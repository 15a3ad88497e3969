//! The lab path: a server host and a client host in namespaces, joined
//! through px-netns's delay element (its own namespace; this kernel has no
//! netem), MTU 9000 on both links, one IPv4 subnet (the element is a bump
//! in the wire). The hosts send wire-sized frames (TSO/GSO off); the
//! element's ports have every offload off. Torn down with the
//! [`QuicPath`], and on SIGINT/SIGTERM by px-netns's cleanup.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use px_netns::line::{LEFT_V4, RIGHT_V4};
use px_netns::{ImpairSpec, ImpairStats, Line, LineImpairment, LineSpec, Netns, Offloads};

use crate::{QuicError, io_err};

/// MTU of both links (a b-network's iMTU).
pub const MTU: u16 = 9000;

/// Offloads, as every result states them.
pub const OFFLOADS: &str = "hosts: tso/gso/tx-udp-segmentation off (wire-sized frames; quinn's UDP GSO is cut by the kernel), gro default; \
     delay element ports: all off";

/// Socket buffer asked for each way (the kernel caps it at
/// `net.core.rmem_max` / `wmem_max` and doubles it): Linux's default
/// (~208 KB) drops bursts of five connections' datagrams at the receiver.
pub const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// A counter of the `Udp:` lines of `/proc/net/snmp` (a header line of
/// names, then a line of values).
#[must_use]
pub fn udp_counter(snmp: &str, name: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The built path.
#[derive(Debug)]
pub struct QuicPath {
    line: Line,
}

fn addr(a: &str, port: u16) -> Result<SocketAddr, QuicError> {
    let ip: Ipv4Addr = a.parse().map_err(|_| QuicError::Config(format!("bad lab address {a}")))?;
    Ok(SocketAddr::from((ip, port)))
}

impl QuicPath {
    /// Builds it with `delay` each way and no loss.
    pub fn build(delay: Duration) -> Result<QuicPath, QuicError> {
        let imp = ImpairSpec { delay, queue_frames: 8192, seed: 0x9b1c, ..ImpairSpec::default() };
        let mtu = u32::from(MTU);
        let spec = LineSpec {
            host_offloads: Offloads::WIRE_SENDER,
            impairment: Some(LineImpairment::Middle(imp)),
            ..LineSpec::new(["qsrv", "qdelay", "qcli"], [mtu, mtu])
        };
        let line = Line::build(spec)?;
        // quinn sends with UDP GSO (`UDP_SEGMENT`); a veth would hand the
        // whole super-datagram to the delay element, which cannot send it
        // on (its ports have segmentation off). Without the feature the
        // kernel cuts it into wire-sized datagrams, as for a NIC without USO.
        for ns in [line.left_ns(), line.right_ns()] {
            ns.exec("ethtool", &["-K", "eth0", "tx-udp-segmentation", "off"])?;
        }
        line.right_ns().ping(LEFT_V4, 1)?;
        Ok(QuicPath { line })
    }

    /// The server host's namespace.
    pub fn server_ns(&self) -> &Netns {
        self.line.left_ns()
    }

    /// The client host's namespace.
    pub fn client_ns(&self) -> &Netns {
        self.line.right_ns()
    }

    /// The server's address on `port`.
    pub fn server_addr(port: u16) -> Result<SocketAddr, QuicError> {
        addr(LEFT_V4, port)
    }

    /// The client host's address on `port`.
    pub fn client_addr(port: u16) -> Result<SocketAddr, QuicError> {
        addr(RIGHT_V4, port)
    }

    /// A non-blocking UDP socket bound to `at` inside `ns` (it stays in
    /// that namespace whichever thread uses it), with [`SOCKET_BUFFER`]
    /// bytes asked for each way.
    pub fn socket(ns: &Netns, at: SocketAddr) -> Result<UdpSocket, QuicError> {
        let s = ns.run(|| UdpSocket::bind(at))?.map_err(io_err("bind"))?;
        s.set_nonblocking(true).map_err(io_err("O_NONBLOCK"))?;
        for (opt, step) in [(libc::SO_RCVBUF, "SO_RCVBUF"), (libc::SO_SNDBUF, "SO_SNDBUF")] {
            let v: libc::c_int = SOCKET_BUFFER;
            // SAFETY: a valid socket fd and a c_int option value of the size passed.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    std::ptr::from_ref(&v).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(QuicError::Io { step, source: std::io::Error::last_os_error() });
            }
        }
        Ok(s)
    }

    /// UDP datagrams the server's and the client's host dropped so far
    /// because a socket's receive buffer was full (`RcvbufErrors`).
    pub fn rcvbuf_errors(&self) -> Result<[u64; 2], QuicError> {
        let read = |ns: &Netns| -> Result<u64, QuicError> {
            let text = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/snmp"))?.map_err(io_err("snmp"))?;
            udp_counter(&text, "RcvbufErrors")
                .ok_or_else(|| QuicError::Config("no Udp RcvbufErrors in /proc/net/snmp".into()))
        };
        Ok([read(self.server_ns())?, read(self.client_ns())?])
    }

    /// Stops the delay element (its counters back) and removes the namespaces.
    pub fn stop(mut self) -> ImpairStats {
        self.line.impairment.take().map(px_netns::Impairment::stop).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_counter_reads_the_udp_lines_only() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 100 2 7 90 5 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    UdpLite: 0 0 0 0 9 0\n";
        assert_eq!(udp_counter(snmp, "RcvbufErrors"), Some(5));
        assert_eq!(udp_counter(snmp, "InDatagrams"), Some(100));
        assert_eq!(udp_counter(snmp, "Nope"), None);
        assert_eq!(udp_counter("Udp: A B\n", "A"), None);
        assert_eq!(udp_counter("Udp: A B\nUdp: 1 x\n", "B"), None);
    }
}
