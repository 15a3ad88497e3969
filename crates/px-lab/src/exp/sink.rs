//! A bulk TCP receiver that can leave the bytes in the kernel, and a
//! sender for it: what the receiver experiments use to split a host's CPU
//! into per-packet and per-byte work.
//!
//! A receiver's CPU per byte is a per-packet part (the stack's work per
//! segment: the device, IP, TCP, the socket's wake-up, the ACKs) and a
//! per-byte part (the copy to user space, and whatever the application
//! does with each byte). Larger segments shrink only the first. iperf3
//! copies every byte into its buffer, so on a machine where copying is
//! dear the per-byte part hides what larger segments save. [`sink`] reads
//! the same way but, in [`ReadMode::Discard`], with `MSG_TRUNC`: Linux's
//! TCP then drops the data without copying it (`tcp_recvmsg`), and what is
//! left is the per-packet part (plus a little per byte: the segments'
//! memory). The difference between [`ReadMode::Copy`] and
//! [`ReadMode::Discard`] is the per-byte part.
//!
//! Both ends are one thread each, polling all their connections (`poll`),
//! pinned to the CPU they are given; the receiver reports its own thread's
//! CPU time (`RUSAGE_THREAD`).

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use px_netns::Netns;
use px_netns::cpu;
use serde::Serialize;

/// How the receiver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// `recv` into a buffer, as any application (and iperf3) does.
    Copy,
    /// `recv` with `MSG_TRUNC`: the kernel drops the bytes, no copy.
    Discard,
}

/// What a receiver took in.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SinkResult {
    /// Bytes received (all connections).
    pub bytes: u64,
    /// From the first byte to the end.
    pub seconds: f64,
    /// The receiving thread's CPU time (user + system).
    pub thread_cpu_s: f64,
}

/// The read buffer (and the most one `recv` takes).
const CHUNK: usize = 256 << 10;

/// Accepts `flows` connections on `addr` in `ns`, then reads them all with
/// `mode` for `duration` on `cpu`; `ready` is called once it listens.
pub fn sink(
    ns: &Netns,
    addr: SocketAddr,
    flows: usize,
    cpu: usize,
    mode: ReadMode,
    duration: Duration,
    ready: impl FnOnce(),
) -> Result<SinkResult, String> {
    let listener =
        ns.run(|| TcpListener::bind(addr)).map_err(|e| e.to_string())?.map_err(|e| format!("{addr}: {e}"))?;
    ready();
    cpu::pin_current_thread(cpu)?;
    px_netns::traffic::set_accept_timeout(&listener, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let mut socks = Vec::with_capacity(flows);
    for _ in 0..flows {
        let (s, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        socks.push(s);
    }
    let flags = match mode {
        ReadMode::Copy => libc::MSG_DONTWAIT,
        ReadMode::Discard => libc::MSG_DONTWAIT | libc::MSG_TRUNC,
    };
    let mut buf = vec![0u8; CHUNK];
    let mut fds: Vec<libc::pollfd> =
        socks.iter().map(|s| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    let (mut bytes, mut start, mut cpu0) = (0u64, None::<Instant>, 0.0);
    let mut open = socks.len();
    while open > 0 && start.is_none_or(|t| t.elapsed() < duration) {
        // SAFETY: `fds` is a valid array of pollfd for its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
        if n < 0 {
            return Err(format!("poll: {}", io::Error::last_os_error()));
        }
        for p in fds.iter_mut().filter(|p| p.fd >= 0 && p.revents != 0) {
            loop {
                // SAFETY: `buf` is valid for CHUNK bytes; with MSG_TRUNC
                // the kernel writes nothing into it.
                let r = unsafe { libc::recv(p.fd, buf.as_mut_ptr().cast(), CHUNK, flags) };
                if r > 0 {
                    if start.is_none() {
                        start = Some(Instant::now());
                        cpu0 = cpu::thread_cpu_seconds();
                    }
                    bytes += r as u64;
                    continue;
                }
                if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                    p.fd = -1;
                    open -= 1;
                }
                break;
            }
        }
    }
    let seconds = start.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Ok(SinkResult { bytes, seconds, thread_cpu_s: cpu::thread_cpu_seconds() - cpu0 })
}

/// Opens `flows` connections to `to` from `ns` and writes to all of them
/// as fast as they take it for `duration`, on `cpu`; returns the bytes
/// written.
pub fn blast(ns: &Netns, to: SocketAddr, flows: usize, cpu: usize, duration: Duration) -> Result<u64, String> {
    cpu::pin_current_thread(cpu)?;
    let socks: Vec<TcpStream> = ns
        .run(|| {
            (0..flows).map(|_| TcpStream::connect_timeout(&to, Duration::from_secs(5))).collect::<io::Result<Vec<_>>>()
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connect {to}: {e}"))?;
    for s in &socks {
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
    }
    let buf = vec![0x5au8; CHUNK];
    let mut fds: Vec<libc::pollfd> =
        socks.iter().map(|s| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLOUT, revents: 0 }).collect();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < duration {
        // SAFETY: `fds` is a valid array of pollfd for its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
        if n < 0 {
            return Err(format!("poll: {}", io::Error::last_os_error()));
        }
        for p in fds.iter().filter(|p| p.revents & libc::POLLOUT != 0) {
            // SAFETY: `buf` is valid for CHUNK bytes.
            let r = unsafe { libc::send(p.fd, buf.as_ptr().cast(), CHUNK, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if r > 0 {
                sent += r as u64;
                continue;
            }
            match io::Error::last_os_error().kind() {
                io::ErrorKind::WouldBlock => {}
                // The receiver has had its time and closed.
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => return Ok(sent),
                _ => return Err(format!("send to {to}: {}", io::Error::last_os_error())),
            }
        }
    }
    // Closing the sockets ends the receiver's connections.
    drop(socks);
    Ok(sent)
}

/// A receiver's CPU seconds per GB with both ends run: the sender on
/// `tx_cpu` in `client`, the receiver on `rx_cpu` in `server`; the
/// receiver's CPU is its thread's time plus `rx_cpu`'s softirq and irq
/// time (what its stack did for it), as [`px_netns::cpu::CpuUse::host_seconds`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SinkRun {
    pub mode: Option<ReadMode>,
    pub gbps: f64,
    pub rx_core_busy: f64,
    pub rx_cpu_s_per_gb: f64,
}

/// One run of [`sink`] against [`blast`] (see [`SinkRun`]).
#[allow(clippy::too_many_arguments)]
pub fn run(
    client: &Netns,
    server: &Netns,
    to: SocketAddr,
    flows: usize,
    mode: ReadMode,
    seconds: u64,
    rx_cpu: usize,
    tx_cpu: usize,
) -> Result<SinkRun, String> {
    let duration = Duration::from_secs(seconds);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let rx = s.spawn(move || {
            let t0 = cpu::CpuTimes::now();
            let r = sink(server, to, flows, rx_cpu, mode, duration, move || {
                let _ = ready_tx.send(());
            });
            (r, t0.since(rx_cpu))
        });
        ready_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| "the receiver did not start".to_string())?;
        let sent = blast(client, to, flows, tx_cpu, duration + Duration::from_millis(300));
        let (got, u) = rx.join().map_err(|_| "the receiver panicked".to_string())?;
        let (got, _) = (got?, sent?);
        let gb = got.bytes as f64 / 1e9;
        Ok(SinkRun {
            mode: Some(mode),
            gbps: cpu::ratio(got.bytes as f64 * 8.0, got.seconds * 1e9),
            rx_core_busy: u.busy(),
            rx_cpu_s_per_gb: cpu::ratio(u.host_seconds(got.thread_cpu_s), gb),
        })
    })
}

/// A receiver's CPU per GB split into its per-packet and per-byte parts,
/// through the router (1448-byte segments) and through the gateway
/// (8948-byte segments): from [`sink`] runs reading with a copy and with
/// `MSG_TRUNC`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuSplit {
    /// Receiver CPU seconds per GB reading with a copy (as an application
    /// does): `[router, gateway]`.
    pub copy_s_per_gb: [f64; 2],
    /// … reading with `MSG_TRUNC` (no copy): the per-packet part.
    pub discard_s_per_gb: [f64; 2],
    /// The per-byte part: copy − discard.
    pub per_byte_s_per_gb: [f64; 2],
    /// Gateway over router with a copy: what an application sees.
    pub copy_ratio: f64,
    /// Gateway over router without the copy: the per-packet saving alone.
    pub discard_ratio: f64,
    /// Throughput of each run, Gbit/s: `[copy, discard]` × `[router, gateway]`.
    pub gbps: [[f64; 2]; 2],
    /// The receiver core's busy fraction of each run (near 1: it was the limit).
    pub rx_core_busy: [[f64; 2]; 2],
}

impl CpuSplit {
    /// From the runs `[copy, discard]` × `[router, gateway]`.
    pub fn of(runs: &[[SinkRun; 2]; 2]) -> CpuSplit {
        let s = |m: usize, p: usize| runs[m][p].rx_cpu_s_per_gb;
        let copy = [s(0, 0), s(0, 1)];
        let discard = [s(1, 0), s(1, 1)];
        CpuSplit {
            copy_s_per_gb: copy,
            discard_s_per_gb: discard,
            per_byte_s_per_gb: [copy[0] - discard[0], copy[1] - discard[1]],
            copy_ratio: cpu::ratio(copy[1], copy[0]),
            discard_ratio: cpu::ratio(discard[1], discard[0]),
            gbps: runs.map(|m| m.map(|r| r.gbps)),
            rx_core_busy: runs.map(|m| m.map(|r| r.rx_core_busy)),
        }
    }

    /// The lines a table prints for it.
    pub fn lines(&self) -> String {
        format!(
            "  receiver CPU s/GB, router (1448-B segments) / gateway (8948-B), gateway÷router:\n\
             \x20   reading with a copy (an application)    {:>7.3} / {:>7.3}   {:.2}×\n\
             \x20   reading with MSG_TRUNC (no copy)        {:>7.3} / {:>7.3}   {:.2}×   ← the per-packet part\n\
             \x20   per-byte part (copy − MSG_TRUNC)        {:>7.3} / {:>7.3}\n\
             \x20   (Gbit/s copy {:.1} / {:.1}, MSG_TRUNC {:.1} / {:.1}; receiver core busy {:.0}–{:.0} %)\n",
            self.copy_s_per_gb[0],
            self.copy_s_per_gb[1],
            self.copy_ratio,
            self.discard_s_per_gb[0],
            self.discard_s_per_gb[1],
            self.discard_ratio,
            self.per_byte_s_per_gb[0],
            self.per_byte_s_per_gb[1],
            self.gbps[0][0],
            self.gbps[0][1],
            self.gbps[1][0],
            self.gbps[1][1],
            100.0 * self.rx_core_busy.iter().flatten().copied().fold(1.0, f64::min),
            100.0 * self.rx_core_busy.iter().flatten().copied().fold(0.0, f64::max),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_copy_minus_discard_per_path() {
        let r = |s| SinkRun { mode: None, gbps: 1.0, rx_core_busy: 0.5, rx_cpu_s_per_gb: s };
        let split = CpuSplit::of(&[[r(1.0), r(0.8)], [r(0.5), r(0.25)]]);
        assert_eq!(split.per_byte_s_per_gb, [0.5, 0.55]);
        assert!((split.copy_ratio - 0.8).abs() < 1e-12);
        assert!((split.discard_ratio - 0.5).abs() < 1e-12);
        assert!(split.lines().contains("0.50×"), "{}", split.lines());
    }
}
