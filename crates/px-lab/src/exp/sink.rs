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
//! Both ends are one thread each, pinned to the CPU they are given: the
//! receiver waits in `epoll` and reads each ready connection once per
//! wake-up (as iperf3 does after its `select`), the sender writes to every
//! connection that takes data, paced to a rate if asked. The receiver
//! reports its own thread's CPU time (`RUSAGE_THREAD`).
//!
//! A receiver's CPU per byte also depends on its load: a busy receiver
//! takes many segments per wake-up, an idle one pays the wake-up (the
//! interrupt between CPUs, the softirq's entry, the `epoll_wait` return)
//! for a few. Two paths compare fairly at the same throughput, so the
//! experiments run the faster path paced to the slower one's.

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
    let ep = Epoll::new()?;
    for (i, s) in socks.iter().enumerate() {
        ep.add(s.as_raw_fd(), i as u64)?;
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; socks.len()];
    let (mut bytes, mut start, mut cpu0) = (0u64, None::<Instant>, 0.0);
    let mut open = socks.len();
    while open > 0 && start.is_none_or(|t| t.elapsed() < duration) {
        let n = ep.wait(&mut events, 200)?;
        for e in &events[..n] {
            let fd = socks[e.u64 as usize].as_raw_fd();
            // One read per ready connection and wake-up: with a 256 KB
            // buffer it takes what is there.
            // SAFETY: `buf` is valid for CHUNK bytes; with MSG_TRUNC the
            // kernel writes nothing into it.
            let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), CHUNK, flags) };
            if r > 0 {
                if start.is_none() {
                    start = Some(Instant::now());
                    cpu0 = cpu::thread_cpu_seconds();
                }
                bytes += r as u64;
            } else if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                ep.remove(fd);
                open -= 1;
            }
        }
    }
    let seconds = start.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Ok(SinkResult { bytes, seconds, thread_cpu_s: cpu::thread_cpu_seconds() - cpu0 })
}

/// An epoll instance, closed on drop.
struct Epoll(libc::c_int);

impl Epoll {
    fn new() -> Result<Epoll, String> {
        // SAFETY: epoll_create1 has no memory arguments.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 { Err(format!("epoll_create1: {}", io::Error::last_os_error())) } else { Ok(Epoll(fd)) }
    }

    fn add(&self, fd: libc::c_int, token: u64) -> Result<(), String> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the call.
        if unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(format!("epoll_ctl: {}", io::Error::last_os_error()));
        }
        Ok(())
    }

    fn remove(&self, fd: libc::c_int) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL.
        unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> Result<usize, String> {
        // SAFETY: `events` is valid for its length.
        let n = unsafe { libc::epoll_wait(self.0, events.as_mut_ptr(), events.len() as i32, timeout_ms) };
        match n {
            n if n >= 0 => Ok(n as usize),
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => Ok(0),
            _ => Err(format!("epoll_wait: {}", io::Error::last_os_error())),
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// How far a sender that has sent `sent` bytes after `elapsed` is ahead of
/// `rate_bps`: how long it waits before it writes again (none: it is due).
fn ahead_of_rate(sent: u64, rate_bps: f64, elapsed: Duration) -> Option<Duration> {
    let due = Duration::try_from_secs_f64(sent as f64 * 8.0 / rate_bps).ok()?;
    due.checked_sub(elapsed).filter(|d| !d.is_zero())
}

/// Opens `flows` connections to `to` from `ns` and writes to all of them
/// for `duration` on `cpu`, as fast as they take it or paced to `rate_bps`
/// in all; returns the bytes written.
pub fn blast(
    ns: &Netns,
    to: SocketAddr,
    flows: usize,
    cpu: usize,
    duration: Duration,
    rate_bps: Option<f64>,
) -> Result<u64, String> {
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
        if let Some(ahead) = rate_bps.and_then(|r| ahead_of_rate(sent, r, t0.elapsed())) {
            std::thread::sleep(ahead);
            continue;
        }
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
    /// Bytes per frame the receiver's device took in (what the middle box
    /// delivered: 1500-byte frames, or the gateway's merged ones).
    pub rx_frame_bytes: f64,
    /// Frames per run of the receiver core's `NET_RX` softirq: the batch
    /// its per-batch work is spread over.
    pub frames_per_softirq: f64,
}

/// Where a [`run`] happens: the sender's and the receiver's namespace, the
/// receiver's device (its frame counters), the CPUs.
#[derive(Debug, Clone, Copy)]
pub struct Ends<'a> {
    pub client: &'a Netns,
    pub server: &'a Netns,
    pub rx_dev: &'a str,
    pub rx_cpu: usize,
    pub tx_cpu: usize,
}

/// One run of [`sink`] against [`blast`] (see [`SinkRun`]), the sender
/// paced to `rate_bps` if given.
pub fn run(
    ends: Ends<'_>,
    to: SocketAddr,
    flows: usize,
    mode: ReadMode,
    seconds: u64,
    rate_bps: Option<f64>,
) -> Result<SinkRun, String> {
    let Ends { client, server, rx_dev, rx_cpu, tx_cpu } = ends;
    let duration = Duration::from_secs(seconds);
    let before = server.dev_counters(rx_dev).map_err(|e| e.to_string())?;
    let softirqs0 = cpu::net_rx_softirqs(rx_cpu).unwrap_or(0);
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
        let sent = blast(client, to, flows, tx_cpu, duration + Duration::from_millis(300), rate_bps);
        let (got, u) = rx.join().map_err(|_| "the receiver panicked".to_string())?;
        let (got, _) = (got?, sent?);
        let frames = server.dev_counters(rx_dev).map_err(|e| e.to_string())?.since(&before);
        let softirqs = cpu::net_rx_softirqs(rx_cpu).unwrap_or(0).saturating_sub(softirqs0);
        let gb = got.bytes as f64 / 1e9;
        Ok(SinkRun {
            mode: Some(mode),
            gbps: cpu::ratio(got.bytes as f64 * 8.0, got.seconds * 1e9),
            rx_core_busy: u.busy(),
            rx_cpu_s_per_gb: cpu::ratio(u.host_seconds(got.thread_cpu_s), gb),
            rx_frame_bytes: cpu::ratio(frames.rx_bytes as f64, frames.rx_packets as f64),
            frames_per_softirq: cpu::ratio(frames.rx_packets as f64, softirqs as f64),
        })
    })
}

/// One path's two runs, `[copy, discard]`, to `addr` on ports `port` and
/// `port + 1`; `pace`: the Gbit/s to keep each of them to (the other
/// path's, so that both receivers work at the same load), or none.
pub fn path_runs(
    ends: Ends<'_>,
    addr: &str,
    port: u16,
    flows: usize,
    seconds: u64,
    pace: Option<[f64; 2]>,
) -> Result<[SinkRun; 2], String> {
    let mut out = [SinkRun::default(); 2];
    for (m, mode) in [ReadMode::Copy, ReadMode::Discard].into_iter().enumerate() {
        let to = format!("{addr}:{}", port + m as u16).parse().map_err(|e| format!("{addr}: {e}"))?;
        let rate = pace.map(|p| p[m] * 1e9).filter(|r| *r > 0.0);
        out[m] = run(ends, to, flows, mode, seconds, rate)?;
    }
    Ok(out)
}

/// A receiver's CPU per GB split into its per-packet and per-byte parts,
/// through the router (1448-byte segments) and through the gateway
/// (8948-byte segments): from [`sink`] runs reading with a copy and with
/// `MSG_TRUNC`, the router's paced to the gateway's throughput.
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
    /// Bytes per frame the receiver took in, `[router, gateway]` (copy
    /// runs): the per-packet part scales with their number.
    pub rx_frame_bytes: [f64; 2],
    /// Frames per receive softirq, `[router, gateway]` (copy runs): fewer
    /// frames in a batch spread the batch's own cost over fewer bytes.
    pub frames_per_softirq: [f64; 2],
}

impl CpuSplit {
    /// From each path's [`path_runs`].
    pub fn of_paths(router: &[SinkRun; 2], gateway: &[SinkRun; 2]) -> CpuSplit {
        CpuSplit::of(&[[router[0], gateway[0]], [router[1], gateway[1]]])
    }

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
            rx_frame_bytes: [runs[0][0].rx_frame_bytes, runs[0][1].rx_frame_bytes],
            frames_per_softirq: [runs[0][0].frames_per_softirq, runs[0][1].frames_per_softirq],
        }
    }

    /// The lines a table prints for it.
    pub fn lines(&self) -> String {
        format!(
            "  receiver CPU s/GB, router (1448-B segments) / gateway (8948-B), gateway÷router:\n\
             \x20   reading with a copy (an application)    {:>7.3} / {:>7.3}   {:.2}×\n\
             \x20   reading with MSG_TRUNC (no copy)        {:>7.3} / {:>7.3}   {:.2}×   ← the per-packet part\n\
             \x20   per-byte part (copy − MSG_TRUNC)        {:>7.3} / {:>7.3}\n\
             \x20   (Gbit/s copy {:.1} / {:.1}, MSG_TRUNC {:.1} / {:.1}; receiver core busy {:.0}–{:.0} %;\n\
             \x20    {:.0} / {:.0} bytes per frame received, {:.1} / {:.1} frames per receive softirq)\n",
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
            self.rx_frame_bytes[0],
            self.rx_frame_bytes[1],
            self.frames_per_softirq[0],
            self.frames_per_softirq[1],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_sender_waits_until_its_bytes_are_due() {
        let gbit = 1e9;
        // 125 MB is one second at 1 Gbit/s.
        assert_eq!(ahead_of_rate(125_000_000, gbit, Duration::from_millis(400)), Some(Duration::from_millis(600)));
        assert_eq!(ahead_of_rate(125_000_000, gbit, Duration::from_secs(1)), None);
        assert_eq!(ahead_of_rate(125_000_000, gbit, Duration::from_secs(2)), None);
        assert_eq!(ahead_of_rate(0, gbit, Duration::ZERO), None);
        assert_eq!(ahead_of_rate(1, f64::NAN, Duration::ZERO), None, "no rate: no wait");
    }

    #[test]
    fn the_split_is_copy_minus_discard_per_path() {
        let r = |s| SinkRun {
            mode: None,
            gbps: 1.0,
            rx_core_busy: 0.5,
            rx_cpu_s_per_gb: s,
            rx_frame_bytes: 1514.0,
            frames_per_softirq: 2.0,
        };
        let split = CpuSplit::of(&[[r(1.0), r(0.8)], [r(0.5), r(0.25)]]);
        assert_eq!(split.per_byte_s_per_gb, [0.5, 0.55]);
        assert!((split.copy_ratio - 0.8).abs() < 1e-12);
        assert!((split.discard_ratio - 0.5).abs() < 1e-12);
        assert!(split.lines().contains("0.50×"), "{}", split.lines());
    }
}
