//! A built-in bulk TCP generator for the lab: parallel flows between two
//! namespaces, every received byte checked, the MSS each socket ended up
//! with read back from the kernel.
//!
//! Each flow sends a 16-byte header (flow number and length) and then a
//! deterministic byte stream seeded by the flow number; the receiver
//! regenerates the stream and compares every byte, so a single corrupted,
//! lost, duplicated or reordered byte is reported with its offset (a
//! stronger check than comparing digests at the end, and it needs no
//! hashing crate). Sockets have timeouts, so a stalled path is an error,
//! not a hang.
//!
//! On request ([`BulkSpec::sha256`]) both ends also compute the SHA-256 of
//! what they sent and received, by coreutils' `sha256sum` fed through a
//! pipe (an implementation independent of this code base): the `px gateway`
//! root tests compare the two digests. Senders can be paced (chunk size and
//! a pause after each write), and [`bulk_tcp_counted`] counts the bytes
//! received so far for a test that acts mid-transfer. [`FlowSender`] and
//! [`receive_flow`] are the two ends on their own, for a test that drives
//! the sender itself.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::netns::Netns;

/// Why a bulk transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    /// A socket operation failed (bind, connect, read, write, timeout).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the flow number.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// A received byte differs from the one sent.
    #[error("flow {flow}: stream differs at byte {offset}")]
    Mismatch {
        /// The flow.
        flow: u64,
        /// Offset of the first wrong byte.
        offset: u64,
    },
    /// The connection closed before all bytes arrived.
    #[error("flow {flow}: got {got} of {want} bytes")]
    Short {
        /// The flow.
        flow: u64,
        /// Bytes received.
        got: u64,
        /// Bytes sent.
        want: u64,
    },
    /// `sha256sum` could not be run.
    #[error("sha256sum: {0}")]
    Digest(io::Error),
    /// Entering a namespace failed, or a worker thread panicked.
    #[error(transparent)]
    Lab(#[from] crate::LabError),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TrafficError {
    let what = what.into();
    move |source| TrafficError::Io { what, source }
}

/// How a sender writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Bytes per write.
    pub chunk: usize,
    /// Pause after each write.
    pub gap: Duration,
}

impl Pace {
    /// As fast as the socket takes it, 64 KiB per write.
    pub const FULL: Pace = Pace { chunk: CHUNK, gap: Duration::ZERO };
}

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkSpec {
    /// Where the server listens (a documentation address in `server`'s namespace).
    pub server: SocketAddr,
    /// Parallel connections.
    pub flows: usize,
    /// Bytes each connection carries.
    pub bytes_per_flow: u64,
    /// Longest a single read, write or connect may stall.
    pub stall_timeout: Duration,
    /// How the senders write.
    pub pace: Pace,
    /// Both ends also compute the SHA-256 of the stream.
    pub sha256: bool,
}

impl BulkSpec {
    /// `flows` flows of `bytes_per_flow` to `server`, at full pace, a 10 s
    /// stall timeout, no digests.
    pub fn new(server: SocketAddr, flows: usize, bytes_per_flow: u64) -> BulkSpec {
        BulkSpec {
            server,
            flows,
            bytes_per_flow,
            stall_timeout: Duration::from_secs(10),
            pace: Pace::FULL,
            sha256: false,
        }
    }
}

/// Kernel view of one TCP socket (`TCP_INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpStats {
    /// MSS the socket sends with.
    pub snd_mss: u32,
    /// MSS estimated for what the peer sends.
    pub rcv_mss: u32,
    /// MSS this socket advertised.
    pub advmss: u32,
    /// Path MTU the socket uses.
    pub pmtu: u32,
    /// Retransmitted segments.
    pub total_retrans: u32,
}

/// `TCP_INFO` of a connected socket.
pub fn tcp_stats(s: &TcpStream) -> io::Result<TcpStats> {
    // SAFETY: tcp_info is plain old data; zero is valid.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `ti` and `len` are live and describe a buffer of that size.
    let r =
        unsafe { libc::getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut ti).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpStats {
        snd_mss: ti.tcpi_snd_mss,
        rcv_mss: ti.tcpi_rcv_mss,
        advmss: ti.tcpi_advmss,
        pmtu: ti.tcpi_pmtu,
        total_retrans: ti.tcpi_total_retrans,
    })
}

/// Result of one flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowResult {
    /// Bytes received and verified.
    pub bytes: u64,
    /// The sending socket at the end of the transfer.
    pub sender: TcpStats,
    /// The receiving socket at the end of the transfer.
    pub receiver: TcpStats,
    /// SHA-256 (hex) of what the sender wrote, if asked for.
    pub sent_sha256: Option<String>,
    /// SHA-256 (hex) of what the receiver read, if asked for.
    pub received_sha256: Option<String>,
}

/// Result of a bulk run.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkResult {
    /// Per flow, in flow order.
    pub flows: Vec<FlowResult>,
    /// From the first connect to the last verified byte.
    pub elapsed: Duration,
}

impl BulkResult {
    /// Goodput over all flows in Gbit/s.
    pub fn gbps(&self) -> f64 {
        let bytes: u64 = self.flows.iter().map(|f| f.bytes).sum();
        bytes as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
}

/// The byte stream of one flow: xorshift64 words, handed out byte by byte
/// so reads of any length continue exactly where the last one stopped.
#[derive(Debug, Clone)]
pub struct Pattern {
    state: u64,
    word: [u8; 8],
    used: usize,
}

impl Pattern {
    /// Any non-zero state works; the flow number and a salt are mixed into
    /// one (the bulk flows use salt 0).
    pub fn new(flow: u64, salt: u64) -> Pattern {
        Pattern {
            state: (0x9e37_79b9_7f4a_7c15 ^ flow.wrapping_mul(0xff51_afd7_ed55_8ccd) ^ salt) | 1,
            word: [0; 8],
            used: 8,
        }
    }

    /// The next `buf.len()` bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() {
            if self.used == 8 {
                self.state ^= self.state << 13;
                self.state ^= self.state >> 7;
                self.state ^= self.state << 17;
                self.word = self.state.to_le_bytes();
                self.used = 0;
            }
            let n = (8 - self.used).min(buf.len() - i);
            buf[i..i + n].copy_from_slice(&self.word[self.used..self.used + n]);
            self.used += n;
            i += n;
        }
    }
}

/// SHA-256 by coreutils' `sha256sum`, fed through a pipe.
#[derive(Debug)]
struct Sha256 {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Sha256 {
    fn new() -> Result<Sha256, TrafficError> {
        let mut child = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(TrafficError::Digest)?;
        let stdin = child.stdin.take();
        Ok(Sha256 { child, stdin })
    }

    fn update(&mut self, b: &[u8]) -> Result<(), TrafficError> {
        match self.stdin.as_mut() {
            Some(i) => i.write_all(b).map_err(TrafficError::Digest),
            None => Ok(()),
        }
    }

    /// The hex digest.
    fn finish(mut self) -> Result<String, TrafficError> {
        drop(self.stdin.take());
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out).map_err(TrafficError::Digest)?;
        }
        self.child.wait().map_err(TrafficError::Digest)?;
        Ok(out.split_whitespace().next().unwrap_or_default().to_string())
    }
}

impl Drop for Sha256 {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const CHUNK: usize = 1 << 16;

/// The length a [`FlowSender`] announces when it does not know it yet:
/// the receiver then takes whatever arrives until the end of the stream.
const OPEN_ENDED: u64 = u64::MAX;

/// The sending end of one flow: connected, header written; writes the
/// flow's stream in pieces of the caller's choosing.
#[derive(Debug)]
pub struct FlowSender {
    s: TcpStream,
    flow: u64,
    pat: Pattern,
    buf: Vec<u8>,
    sent: u64,
    sha: Option<Sha256>,
    server: SocketAddr,
}

/// What a [`FlowSender`] sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFlow {
    /// Bytes written.
    pub bytes: u64,
    /// SHA-256 (hex) of them, if asked for.
    pub sha256: Option<String>,
    /// The socket at the end.
    pub stats: TcpStats,
}

impl FlowSender {
    /// Connects to `server` (from the calling thread's namespace) and
    /// announces flow `flow` of `len` bytes (`None`: until
    /// [`FlowSender::finish`]).
    pub fn connect(
        server: SocketAddr,
        flow: u64,
        len: Option<u64>,
        stall: Duration,
        sha256: bool,
    ) -> Result<FlowSender, TrafficError> {
        let s = TcpStream::connect_timeout(&server, stall).map_err(io_err(format!("flow {flow}: connect {server}")))?;
        FlowSender::over(s, flow, len, stall, sha256)
    }

    /// As [`FlowSender::connect`], on a stream the caller connected (an
    /// MPTCP socket, say: any stream socket whose peer runs
    /// [`receive_flow`]).
    pub fn over(
        mut s: TcpStream,
        flow: u64,
        len: Option<u64>,
        stall: Duration,
        sha256: bool,
    ) -> Result<FlowSender, TrafficError> {
        let server = s.peer_addr().map_err(io_err(format!("flow {flow}: peer address")))?;
        let what = |s: &str| format!("flow {flow}: {s} {server}");
        s.set_write_timeout(Some(stall)).map_err(io_err(what("timeout")))?;
        s.set_read_timeout(Some(stall)).map_err(io_err(what("timeout")))?;
        let mut hdr = [0u8; 16];
        hdr[..8].copy_from_slice(&flow.to_be_bytes());
        hdr[8..].copy_from_slice(&len.unwrap_or(OPEN_ENDED).to_be_bytes());
        s.write_all(&hdr).map_err(io_err(what("write")))?;
        let sha = if sha256 { Some(Sha256::new()?) } else { None };
        Ok(FlowSender { s, flow, pat: Pattern::new(flow, 0), buf: Vec::new(), sent: 0, sha, server })
    }

    /// Writes the next `n` bytes of the stream.
    pub fn send(&mut self, n: usize) -> Result<(), TrafficError> {
        self.buf.resize(n, 0);
        self.pat.fill(&mut self.buf);
        let (flow, sent) = (self.flow, self.sent);
        self.s
            .write_all(&self.buf)
            .map_err(io_err(format!("flow {flow}: write to {} after {sent} bytes", self.server)))?;
        if let Some(sha) = self.sha.as_mut() {
            sha.update(&self.buf)?;
        }
        self.sent += n as u64;
        Ok(())
    }

    /// Closes the sending side and waits for the receiver to close: then
    /// every byte has been read there.
    pub fn finish(mut self) -> Result<SentFlow, TrafficError> {
        let what = |s: &str| format!("flow {}: {s} {}", self.flow, self.server);
        self.s.shutdown(Shutdown::Write).map_err(io_err(what("shutdown")))?;
        let mut one = [0u8; 1];
        let _ = self.s.read(&mut one).map_err(io_err(what("wait for close")))?;
        let stats = tcp_stats(&self.s).map_err(io_err(what("TCP_INFO")))?;
        let sha256 = self.sha.take().map(Sha256::finish).transpose()?;
        Ok(SentFlow { bytes: self.sent, sha256, stats })
    }
}

fn send_flow(spec: &BulkSpec, flow: u64) -> Result<SentFlow, TrafficError> {
    let mut s = FlowSender::connect(spec.server, flow, Some(spec.bytes_per_flow), spec.stall_timeout, spec.sha256)?;
    let mut left = spec.bytes_per_flow;
    let chunk = spec.pace.chunk.max(1);
    while left > 0 {
        let n = usize::try_from(left).unwrap_or(chunk).min(chunk);
        s.send(n)?;
        left -= n as u64;
        if !spec.pace.gap.is_zero() {
            std::thread::sleep(spec.pace.gap);
        }
    }
    s.finish()
}

/// What the receiving end of one flow got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedFlow {
    /// The flow number from the header.
    pub flow: u64,
    /// Bytes received, each equal to the one sent.
    pub bytes: u64,
    /// SHA-256 (hex) of them, if asked for.
    pub sha256: Option<String>,
    /// The socket at the end.
    pub stats: TcpStats,
}

/// Receives one flow on an accepted connection until the sender closes,
/// verifying every byte and adding the bytes to `progress` as they come.
pub fn receive_flow(
    mut s: TcpStream,
    timeout: Duration,
    progress: &AtomicU64,
    sha256: bool,
) -> Result<ReceivedFlow, TrafficError> {
    s.set_read_timeout(Some(timeout)).map_err(io_err("receiver timeout"))?;
    let mut hdr = [0u8; 16];
    s.read_exact(&mut hdr).map_err(io_err("receiver: flow header"))?;
    let flow = u64::from_be_bytes(hdr[..8].try_into().unwrap_or_default());
    let want = u64::from_be_bytes(hdr[8..].try_into().unwrap_or_default());
    let (mut pat, mut got, mut exp) = (Pattern::new(flow, 0), vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut sha = if sha256 { Some(Sha256::new()?) } else { None };
    let mut total = 0u64;
    loop {
        let n = s.read(&mut got).map_err(io_err(format!("flow {flow}: read after {total} bytes")))?;
        if n == 0 {
            break;
        }
        pat.fill(&mut exp[..n]);
        if let Some(i) = got[..n].iter().zip(&exp[..n]).position(|(a, b)| a != b) {
            return Err(TrafficError::Mismatch { flow, offset: total + i as u64 });
        }
        if let Some(sha) = sha.as_mut() {
            sha.update(&got[..n])?;
        }
        total += n as u64;
        progress.fetch_add(n as u64, Ordering::Relaxed);
    }
    if want != OPEN_ENDED && total != want {
        return Err(TrafficError::Short { flow, got: total, want });
    }
    let stats = tcp_stats(&s).map_err(io_err(format!("flow {flow}: TCP_INFO")))?;
    let sha256 = sha.map(Sha256::finish).transpose()?;
    Ok(ReceivedFlow { flow, bytes: total, sha256, stats })
}

/// Makes `accept` on `l` give up after `t` (SO_RCVTIMEO applies to accept
/// on Linux), so a sender that never connects cannot hang the run.
pub fn set_accept_timeout(l: &TcpListener, t: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros() as i32),
    };
    // SAFETY: `tv` is a live timeval and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Runs `spec.flows` parallel flows from `client`'s namespace to a server
/// in `server`'s namespace and verifies every byte.
pub fn bulk_tcp(client: &Netns, server: &Netns, spec: &BulkSpec) -> Result<BulkResult, TrafficError> {
    bulk_tcp_counted(client, server, spec, &AtomicU64::new(0))
}

/// [`bulk_tcp`], adding every byte received (all flows) to `progress`.
pub fn bulk_tcp_counted(
    client: &Netns,
    server: &Netns,
    spec: &BulkSpec,
    progress: &AtomicU64,
) -> Result<BulkResult, TrafficError> {
    let listener = server.run(|| TcpListener::bind(spec.server))?.map_err(io_err(format!("bind {}", spec.server)))?;
    set_accept_timeout(&listener, spec.stall_timeout).map_err(io_err("accept timeout"))?;
    let start = Instant::now();
    let outcome = std::thread::scope(|sc| {
        let acceptor = sc.spawn(|| {
            std::thread::scope(|inner| {
                let mut handles = Vec::new();
                for _ in 0..spec.flows {
                    let (s, _) = listener.accept().map_err(io_err("accept"))?;
                    handles.push(inner.spawn(move || receive_flow(s, spec.stall_timeout, progress, spec.sha256)));
                }
                handles
                    .into_iter()
                    .map(|h| h.join().map_err(|_| crate::LabError::Panicked(server.name().to_owned()))?)
                    .collect::<Result<Vec<_>, TrafficError>>()
            })
        });
        let senders: Vec<_> =
            (0..spec.flows as u64).map(|flow| sc.spawn(move || client.run(|| send_flow(spec, flow)))).collect();
        let sent: Vec<Result<SentFlow, TrafficError>> = senders
            .into_iter()
            .map(|h| match h.join() {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(crate::LabError::Panicked(client.name().to_owned()).into()),
            })
            .collect();
        let received = acceptor.join().map_err(|_| crate::LabError::Panicked(server.name().to_owned()))?;
        Ok::<_, TrafficError>((sent, received))
    });
    let (sent, received) = outcome?;
    let elapsed = start.elapsed();
    let mut received = match received {
        Ok(r) => r,
        // Wrong bytes are the most important finding; otherwise a sender's
        // error (connect refused, write stalled) explains the receiver's.
        Err(e @ (TrafficError::Mismatch { .. } | TrafficError::Short { .. })) => return Err(e),
        Err(e) => return Err(sent.into_iter().find_map(Result::err).unwrap_or(e)),
    };
    received.sort_by_key(|r| r.flow);
    let mut flows = Vec::with_capacity(spec.flows);
    for (s, r) in sent.into_iter().zip(received) {
        let s = s?;
        flows.push(FlowResult {
            bytes: r.bytes,
            sender: s.stats,
            receiver: r.stats,
            sent_sha256: s.sha256,
            received_sha256: r.sha256,
        });
    }
    Ok(BulkResult { flows, elapsed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_differs_per_flow() {
        let (mut a, mut b, mut c) = (Pattern::new(1, 0), Pattern::new(1, 0), Pattern::new(2, 0));
        let (mut x, mut y, mut z) = ([0u8; 100], [0u8; 100], [0u8; 100]);
        a.fill(&mut x);
        b.fill(&mut y);
        c.fill(&mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert!(x.iter().any(|&v| v != x[0]));
    }

    #[test]
    fn reads_of_any_length_continue_the_stream() {
        let mut whole = vec![0u8; 1000];
        Pattern::new(5, 0).fill(&mut whole);
        let mut p = Pattern::new(5, 0);
        let mut pieces = Vec::new();
        for len in [1usize, 7, 8, 9, 3, 333, 639] {
            let mut b = vec![0u8; len];
            p.fill(&mut b);
            pieces.extend_from_slice(&b);
        }
        assert_eq!(pieces, whole);
    }

    #[test]
    fn gbps_of_a_result() {
        let st = TcpStats::default();
        let f = FlowResult { bytes: 125_000_000, sender: st, receiver: st, sent_sha256: None, received_sha256: None };
        let r = BulkResult { flows: vec![f.clone(), f], elapsed: Duration::from_secs(1) };
        assert!((r.gbps() - 2.0).abs() < 1e-9);
    }
}
