//! A plain UDP receiver with the `UDP_GRO` socket option, for the
//! baseline of `px lab receiver`'s UDP case: the kernel hands a socket that
//! asked for it consecutive datagrams of a flow as one buffer plus their
//! size (a `UDP_GRO` control message), which is what the paper's 1500-byte
//! baseline had. It counts datagrams and bytes only (no content check, so
//! it is, if anything, cheaper per datagram than `px caravan recv`).
//!
//! Runs on a thread that entered the receiver's namespace and pinned
//! itself to a CPU; its CPU time is the thread's (`RUSAGE_THREAD`).

use std::time::{Duration, Instant};

use serde::Serialize;

use px_netns::netns::Netns;

/// `SOL_UDP` / `UDP_GRO` (linux/udp.h); not in every libc target.
const SOL_UDP: libc::c_int = 17;
const UDP_GRO: libc::c_int = 104;

/// What the receiver saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UdpGroSummary {
    /// Datagrams received (a coalesced read counts each segment).
    pub datagrams: u64,
    /// Payload bytes.
    pub payload_bytes: u64,
    /// Socket reads.
    pub reads: u64,
    /// From the first to the last datagram.
    pub seconds: f64,
    /// Payload throughput.
    pub gbit_per_s: f64,
    /// CPU seconds of the receiving thread.
    pub cpu_s: f64,
    /// Datagrams per CPU second.
    pub datagrams_per_cpu_s: f64,
}

/// Receives on UDP `port` in `ns` on `cpu` until `limit` passed or nothing
/// arrived for `idle` after the first datagram; `ready` is called once the
/// socket is bound.
pub fn receive(
    ns: &Netns,
    port: u16,
    cpu: usize,
    limit: Duration,
    idle: Duration,
    ready: impl FnOnce(),
) -> Result<UdpGroSummary, String> {
    let _g = ns.enter().map_err(|e| e.to_string())?;
    px_netns::cpu::pin_current_thread(cpu)?;
    let sock = std::net::UdpSocket::bind(("0.0.0.0", port)).map_err(|e| format!("bind UDP {port}: {e}"))?;
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let one: libc::c_int = 1;
    let rcvbuf: libc::c_int = 32 << 20;
    // SAFETY: setsockopt with pointers to live ints and their sizes.
    unsafe {
        if libc::setsockopt(fd, SOL_UDP, UDP_GRO, (&raw const one).cast(), 4) != 0 {
            return Err(format!("UDP_GRO: {}", std::io::Error::last_os_error()));
        }
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&raw const rcvbuf).cast(), 4);
    }
    sock.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    ready();
    let mut buf = vec![0u8; 65_536];
    let mut ctrl = [0u64; 16];
    let (start, mut first, mut last) = (Instant::now(), None::<Instant>, Instant::now());
    let mut sum = UdpGroSummary::default();
    let mut cpu0 = 0.0;
    while start.elapsed() < limit && !px_netns::interrupted() {
        if first.is_some() && last.elapsed() >= idle {
            break;
        }
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
        // SAFETY: msg points to live buffers of the sizes given.
        let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
        if n <= 0 {
            continue;
        }
        let now = Instant::now();
        if first.is_none() {
            first = Some(now);
            cpu0 = px_netns::cpu::thread_cpu_seconds();
        }
        last = now;
        let n = n as u64;
        let mut seg = n;
        // SAFETY: walking the control messages the kernel wrote into `ctrl`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    let size = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    seg = u64::try_from(size).unwrap_or(1).max(1);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        sum.reads += 1;
        sum.payload_bytes += n;
        sum.datagrams += n.div_ceil(seg);
    }
    sum.cpu_s = px_netns::cpu::thread_cpu_seconds() - cpu0;
    sum.seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    sum.gbit_per_s = crate::exp::ratio(sum.payload_bytes as f64 * 8.0, sum.seconds * 1e9);
    sum.datagrams_per_cpu_s = crate::exp::ratio(sum.datagrams as f64, sum.cpu_s);
    Ok(sum)
}
