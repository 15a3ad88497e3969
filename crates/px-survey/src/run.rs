//! The survey on Linux: raw sockets, the rule that keeps the kernel from
//! resetting our raw connections, and the loop that drives the state
//! machines of [`crate::exchange`] under the rate limits of [`crate::rate`].
//!
//! What it sends, per target (IPv4 only): a TCP connection with an HTTP
//! request sent whole; the same with the request cut into IP fragments;
//! where fragments get no answer, the request's first fragment and the
//! whole request with TTL 1, 2, … (the hop test); once per address, a
//! connection whose first full-sized answer segment gets an ICMP
//! "fragmentation needed" (the PMTUD test). Every connection ends with an
//! RST. Our TCP is our own (the kernel's never fragments), on source ports
//! outside the kernel's ephemeral range; while the survey runs, an nftables
//! table drops the RSTs the kernel would send for those ports (our own
//! packets carry a firewall mark and pass).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_io::RawIpSockets;

use crate::exchange::{Ends, HopConfig, HopTest, Mode, TcpConfig, TcpExchange, TcpOutcome};
use crate::packet::{Incoming, parse};
use crate::rate::RateLimiter;
use crate::record::{FetchResult, Fingerprint, FragmentPath, Pmtud, Record, Resume, ResumeError, classify};
use crate::target::Target;

/// The firewall mark on the survey's own packets (`PX` + 1).
pub const MARK: u32 = 0x5058_0001;

/// How the survey runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Targets in progress at once.
    pub concurrency: usize,
    /// Global packets per second and burst.
    pub rate: (f64, f64),
    /// Packets per second and burst toward one address.
    pub per_destination: (f64, f64),
    pub tcp: TcpConfig,
    /// Extra connections after a failed one (plain and fragmented fetch).
    pub retries: u32,
    /// IP fragments the request is cut into.
    pub fragments: usize,
    pub hops: HopConfig,
    /// The MTU the PMTUD test announces.
    pub ptb_mtu: u16,
    /// Our source ports (outside the kernel's ephemeral range).
    pub ports: (u16, u16),
    /// The HTTP request path.
    pub path: String,
    /// Run even in the initial network namespace (the real Internet).
    pub allow_host_namespace: bool,
}

/// Progress, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub elapsed: Duration,
}

/// How the run went.
#[derive(Clone, Copy, Debug)]
pub struct RunSummary {
    /// Targets surveyed in this run.
    pub surveyed: usize,
    /// Targets skipped because the output already had them.
    pub skipped: usize,
    pub elapsed: Duration,
    /// Stopped by a signal before the end.
    pub interrupted: bool,
    /// Packets sent.
    pub packets: u64,
}

/// Why a survey could not run.
#[derive(Debug, thiserror::Error)]
pub enum SurveyError {
    #[error(
        "refusing to send from the initial network namespace: the survey sends real packets to every target; \
         run it inside a namespace (`ip netns exec …`) or pass --allow-host-namespace to survey real servers"
    )]
    HostNamespace,
    #[error("cannot open raw sockets ({0}): the survey needs root or CAP_NET_RAW and CAP_NET_ADMIN")]
    RawSocket(io::Error),
    #[error("cannot install the nftables rule that keeps the kernel from resetting the survey's connections: {0}")]
    Firewall(String),
    #[error(
        "source ports {lo}-{hi} overlap the kernel's ephemeral range {klo}-{khi} (net.ipv4.ip_local_port_range); choose --ports outside it"
    )]
    PortRange { lo: u16, hi: u16, klo: u16, khi: u16 },
    #[error("output {path}: {source}")]
    Output { path: PathBuf, source: io::Error },
    #[error("output {path}: {source}")]
    Resume { path: PathBuf, source: ResumeError },
    #[error("raw socket I/O: {0}")]
    Io(io::Error),
}

/// Whether this process may be in the host's network namespace: that of
/// PID 1 or, where PID 1 is hidden (a container), any namespace that is not
/// one of the named ones of `ip netns` (`/run/netns`).
pub fn in_initial_namespace() -> io::Result<bool> {
    let me = std::fs::metadata("/proc/self/ns/net")?.ino();
    let init = std::fs::metadata("/proc/1/ns/net").ok().map(|m| m.ino());
    let named: Vec<u64> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::metadata(e.path()).ok().map(|m| m.ino()))
        .collect();
    Ok(is_host_namespace(me, init, &named))
}

/// The decision of [`in_initial_namespace`] from namespace inode numbers:
/// ours, PID 1's (if readable), those of `/run/netns`.
pub fn is_host_namespace(me: u64, init: Option<u64>, named: &[u64]) -> bool {
    match init {
        Some(init) => init == me,
        None => !named.contains(&me),
    }
}

/// The nftables table that drops the kernel's RSTs for our ports; removed
/// on drop.
struct RstFilter {
    table: String,
}

impl RstFilter {
    fn install(ports: (u16, u16)) -> Result<RstFilter, SurveyError> {
        remove_stale_tables();
        let table = format!("px_survey_{}", std::process::id());
        let script = format!(
            "add table ip {table}\n\
             add chain ip {table} out {{ type filter hook output priority 0; policy accept; }}\n\
             add rule ip {table} out meta mark != {MARK:#x} tcp sport {}-{} tcp flags & rst == rst drop\n",
            ports.0, ports.1
        );
        nft(&script).map_err(SurveyError::Firewall)?;
        Ok(RstFilter { table })
    }
}

impl Drop for RstFilter {
    fn drop(&mut self) {
        let _ = nft(&format!("delete table ip {}\n", self.table));
    }
}

/// Removes the tables of surveys that were killed (no cleanup on SIGKILL)
/// in this namespace: `px_survey_PID` whose process is gone.
fn remove_stale_tables() {
    let Ok(out) = Command::new("nft").args(["list", "tables", "ip"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(pid) = line.trim().strip_prefix("table ip px_survey_").and_then(|p| p.parse::<u32>().ok())
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = nft(&format!("delete table ip px_survey_{pid}\n"));
        }
    }
}

fn nft(script: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    child.stdin.take().map(|mut s| s.write_all(script.as_bytes()));
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_string()) }
}

fn kernel_port_range() -> Option<(u16, u16)> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

enum Stage {
    Plain,
    Fragmented,
    Hops,
    Pmtud,
}

enum Current {
    Tcp(TcpExchange),
    Hops(HopTest),
    None,
}

/// One target in progress.
struct Job {
    target: Target,
    src: Ipv4Addr,
    started: Duration,
    stage: Stage,
    attempt: u32,
    stage_started: Duration,
    plain: Option<FetchResult>,
    fragmented: Option<FetchResult>,
    path: Option<FragmentPath>,
    pmtud: (Pmtud, Option<String>),
    current: Current,
    sport: u16,
    pending: VecDeque<Vec<u8>>,
    finished: bool,
}

/// The loop's state besides the jobs.
struct Driver<'a> {
    opts: &'a Options,
    request_for: HashMap<String, Vec<u8>>,
    ports_in_use: HashSet<u16>,
    next_port: u16,
    rng: u64,
    exchanges: u32,
    by_conn: HashMap<(Ipv4Addr, u16, u16), usize>,
    pmtud_claimed: HashMap<Ipv4Addr, String>,
}

impl Driver<'_> {
    fn request(&mut self, t: &Target) -> Vec<u8> {
        let path = &self.opts.path;
        self.request_for
            .entry(t.key())
            .or_insert_with(|| {
                format!(
                    "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: px-survey/{} (fragment-delivery survey)\r\n\
                     Accept: */*\r\nConnection: close\r\n\r\n",
                    t.host_header(),
                    env!("CARGO_PKG_VERSION")
                )
                .into_bytes()
            })
            .clone()
    }

    fn random(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 16) as u32
    }

    fn port(&mut self) -> Option<u16> {
        let (lo, hi) = self.opts.ports;
        for _ in lo..=hi {
            let p = self.next_port;
            self.next_port = if p >= hi { lo } else { p + 1 };
            if self.ports_in_use.insert(p) {
                return Some(p);
            }
        }
        None
    }

    fn ident(&mut self) -> u16 {
        self.exchanges = self.exchanges.wrapping_add(1);
        (self.exchanges as u16).wrapping_mul(256).wrapping_add(self.random() as u16 & 0x3f)
    }

    /// Starts the job's next connection or hop test (after `release`).
    fn start(&mut self, now: Duration, id: usize, job: &mut Job) {
        self.release(job);
        let Some(sport) = self.port() else {
            // Every port busy: try again on the next turn of the loop.
            return;
        };
        job.sport = sport;
        job.stage_started = now;
        let ends = Ends { src: job.src, dst: job.target.addr, sport, dport: job.target.port };
        let req = self.request(&job.target);
        let (iss, ident) = (self.random(), self.ident());
        job.current = match job.stage {
            Stage::Plain => {
                Current::Tcp(TcpExchange::new(now, Mode::Fetch { fragments: 0 }, self.opts.tcp, ends, iss, ident, req))
            }
            Stage::Fragmented => Current::Tcp(TcpExchange::new(
                now,
                Mode::Fetch { fragments: self.opts.fragments },
                self.opts.tcp,
                ends,
                iss,
                ident,
                req,
            )),
            Stage::Pmtud => Current::Tcp(TcpExchange::new(
                now,
                Mode::Pmtud { mtu: self.opts.ptb_mtu },
                self.opts.tcp,
                ends,
                iss,
                ident,
                req,
            )),
            Stage::Hops => Current::Hops(HopTest::new(now, self.opts.hops, ends, iss, ident, &req)),
        };
        // TCP segments come from the target's port; a hop test's answers
        // quote our source port (keyed with port 0).
        let key_port = if matches!(job.current, Current::Tcp(_)) { ends.dport } else { 0 };
        self.by_conn.insert((ends.dst, key_port, sport), id);
    }

    fn release(&mut self, job: &mut Job) {
        if job.sport != 0 {
            self.ports_in_use.remove(&job.sport);
            self.by_conn.remove(&(job.target.addr, job.target.port, job.sport));
            self.by_conn.remove(&(job.target.addr, 0, job.sport));
            job.sport = 0;
        }
        job.current = Current::None;
    }

    /// Moves the job on after its current exchange finished.
    fn advance(&mut self, now: Duration, id: usize, job: &mut Job) {
        let ms = (now - job.stage_started).as_secs_f64() * 1e3;
        let tcp_outcome = match &job.current {
            Current::Tcp(x) => match x.outcome() {
                Some(o) => Some(o.clone()),
                None => return,
            },
            Current::Hops(h) => match h.result() {
                Some(r) => {
                    job.path = Some(r.clone());
                    None
                }
                None => return,
            },
            Current::None => None,
        };
        let fetch = |o: &TcpOutcome, attempt: u32| match o {
            TcpOutcome::Answer(bytes) => match Fingerprint::of(bytes) {
                Ok(fp) => FetchResult { fingerprint: Some(fp), failure: None, attempts: attempt + 1, ms },
                Err(why) => FetchResult { fingerprint: None, failure: Some(why), attempts: attempt + 1, ms },
            },
            TcpOutcome::Failed(why) => {
                FetchResult { fingerprint: None, failure: Some(why.clone()), attempts: attempt + 1, ms }
            }
            TcpOutcome::Pmtud(..) => unreachable!("a fetch has no PMTUD verdict"),
        };
        let retry = |r: &FetchResult, attempt: u32, retries: u32| {
            r.fingerprint.is_none()
                && attempt < retries
                && r.failure.as_deref().is_some_and(|f| f.starts_with("timeout"))
        };
        match (&job.stage, tcp_outcome) {
            (Stage::Plain, Some(o)) => {
                let r = fetch(&o, job.attempt);
                if retry(&r, job.attempt, self.opts.retries) {
                    job.attempt += 1;
                } else {
                    let answered = r.answered();
                    job.plain = Some(r);
                    job.attempt = 0;
                    if answered {
                        job.stage = Stage::Fragmented;
                    } else {
                        job.pmtud = (Pmtud::NotTested, None);
                        return self.finish(job);
                    }
                }
            }
            (Stage::Fragmented, Some(o)) => {
                let r = fetch(&o, job.attempt);
                if retry(&r, job.attempt, self.opts.retries) {
                    job.attempt += 1;
                } else {
                    let answered = r.answered();
                    job.fragmented = Some(r);
                    job.attempt = 0;
                    if answered {
                        self.begin_pmtud(job);
                    } else {
                        job.stage = Stage::Hops;
                    }
                }
            }
            (Stage::Hops, None) => self.begin_pmtud(job),
            (Stage::Pmtud, Some(TcpOutcome::Pmtud(v, note))) => {
                job.pmtud = (v, note);
                return self.finish(job);
            }
            _ => unreachable!("stage and exchange agree"),
        }
        if job.finished {
            return self.release(job);
        }
        self.start(now, id, job);
    }

    fn begin_pmtud(&mut self, job: &mut Job) {
        match self.pmtud_claimed.get(&job.target.addr) {
            Some(other) => {
                job.pmtud = (Pmtud::SameAddress, Some(format!("tested on {other}")));
                self.finish(job);
            }
            None => {
                self.pmtud_claimed.insert(job.target.addr, job.target.key());
                job.stage = Stage::Pmtud;
            }
        }
    }

    fn finish(&mut self, job: &mut Job) {
        job.finished = true;
        self.release(job);
    }
}

fn source_for(t: &Target) -> io::Result<Ipv4Addr> {
    let s = UdpSocket::bind("0.0.0.0:0")?;
    s.connect(SocketAddrV4::new(t.addr, t.port))?;
    match s.local_addr()? {
        std::net::SocketAddr::V4(a) => Ok(*a.ip()),
        std::net::SocketAddr::V6(_) => Err(io::Error::other("IPv6 source")),
    }
}

fn record(job: &Job, now: Duration, fragments: usize) -> Record {
    let plain = job.plain.clone().unwrap_or(FetchResult {
        fingerprint: None,
        failure: Some("no route".into()),
        attempts: 0,
        ms: 0.0,
    });
    let identical = match (&plain.fingerprint, job.fragmented.as_ref().and_then(|f| f.fingerprint.as_ref())) {
        (Some(p), Some(f)) => Some(p == f),
        (Some(_), None) if job.fragmented.is_some() => Some(false),
        _ => None,
    };
    Record {
        target: job.target.key(),
        addr: job.target.addr,
        port: job.target.port,
        host: job.target.host.clone(),
        class: classify(&plain, job.fragmented.as_ref(), job.path.as_ref()),
        plain,
        fragmented: job.fragmented.clone(),
        fragments,
        identical,
        fragment_path: job.path.clone(),
        icmp_pmtud: job.pmtud.0,
        pmtud_note: job.pmtud.1.clone(),
        ms: (now - job.started).as_secs_f64() * 1e3,
    }
}

/// Surveys `targets`, appending one line per finished target to `out`
/// (targets already there are skipped). Returns when all are done or
/// `stop` is set (then unfinished targets are not written: a later run
/// does them).
pub fn run(
    targets: &[Target],
    out: &Path,
    opts: &Options,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunSummary, SurveyError> {
    if !opts.allow_host_namespace && in_initial_namespace().unwrap_or(true) {
        return Err(SurveyError::HostNamespace);
    }
    if let Some((klo, khi)) = kernel_port_range()
        && opts.ports.0 <= khi
        && opts.ports.1 >= klo
    {
        return Err(SurveyError::PortRange { lo: opts.ports.0, hi: opts.ports.1, klo, khi });
    }
    let output_err = |source| SurveyError::Output { path: out.to_path_buf(), source };
    let text = match std::fs::read(out) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(output_err(e)),
    };
    let resume = Resume::read(&text).map_err(|source| SurveyError::Resume { path: out.to_path_buf(), source })?;
    let mut file: File = OpenOptions::new().create(true).write(true).truncate(false).open(out).map_err(output_err)?;
    file.set_len(resume.valid_len as u64).map_err(output_err)?;
    file = OpenOptions::new().append(true).open(out).map_err(output_err)?;

    let sockets = RawIpSockets::open(MARK).map_err(SurveyError::RawSocket)?;
    let _filter = RstFilter::install(opts.ports)?;

    let mut queue: VecDeque<&Target> = targets.iter().filter(|t| !resume.done.contains(&t.key())).collect();
    let skipped = targets.len() - queue.len();
    let total = queue.len();
    // Initial sequence numbers and identifications: unpredictable per run.
    let seed = px_io::random_u64().map_err(SurveyError::Io)?;
    let mut d = Driver {
        opts,
        request_for: HashMap::new(),
        ports_in_use: HashSet::new(),
        next_port: opts.ports.0,
        rng: seed | 1,
        exchanges: 0,
        by_conn: HashMap::new(),
        pmtud_claimed: resume.pmtud_tested.clone(),
    };
    let mut limiter = RateLimiter::new(opts.rate, opts.per_destination);
    let clock = Instant::now();
    let mut jobs: Vec<Option<Job>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut active = 0usize;
    let mut done = 0usize;
    let mut packets = 0u64;
    let mut last_progress = Duration::ZERO;
    let mut last_forget = Duration::ZERO;
    let mut buf = vec![0u8; 65536];
    let mut interrupted = false;
    loop {
        let now = clock.elapsed();
        if stop.load(Ordering::SeqCst) {
            interrupted = !(queue.is_empty() && active == 0);
            // Leave no half-open connections behind: an RST for each (at
            // most one per target in progress), then what was queued.
            for job in jobs.iter_mut().flatten() {
                if let Current::Tcp(x) = &mut job.current {
                    x.abort();
                    job.pending.extend(std::iter::from_fn(|| x.poll_transmit()));
                }
                // Only the RSTs: whatever else was waiting (a SYN) is moot.
                let is_rst = |p: &Vec<u8>| p.get(9) == Some(&6) && p.get(33).is_some_and(|f| f & 0x04 != 0);
                for p in job.pending.drain(..).filter(is_rst) {
                    let _ = sockets.send(&p);
                }
            }
            break;
        }
        while active < opts.concurrency
            && let Some(t) = queue.pop_front()
        {
            let mut job = Job {
                target: t.clone(),
                src: Ipv4Addr::UNSPECIFIED,
                started: now,
                stage: Stage::Plain,
                attempt: 0,
                stage_started: now,
                plain: None,
                fragmented: None,
                path: None,
                pmtud: (Pmtud::NotTested, None),
                current: Current::None,
                sport: 0,
                pending: VecDeque::new(),
                finished: false,
            };
            let id = free.pop().unwrap_or_else(|| {
                jobs.push(None);
                jobs.len() - 1
            });
            match source_for(t) {
                Ok(src) => {
                    job.src = src;
                    d.start(now, id, &mut job);
                }
                Err(e) => {
                    job.plain = Some(FetchResult {
                        fingerprint: None,
                        failure: Some(format!("no route: {e}")),
                        attempts: 0,
                        ms: 0.0,
                    });
                    job.finished = true;
                }
            }
            jobs[id] = Some(job);
            active += 1;
        }
        if active == 0 && queue.is_empty() {
            break;
        }
        // Receive.
        while let Some(n) = sockets.recv_tcp(&mut buf) {
            if let Incoming::Tcp(t) = parse(&buf[..n])
                && let Some(&id) = d.by_conn.get(&(t.src, t.sport, t.dport))
                && let Some(job) = jobs[id].as_mut()
                && let Current::Tcp(x) = &mut job.current
            {
                x.on_tcp(now, &t);
            }
        }
        while let Some(n) = sockets.recv_icmp(&mut buf) {
            if let Incoming::TimeExceeded { from, quoted_dst, quoted_ident, quoted_sport: Some(sport) } =
                parse(&buf[..n])
                && let Some(&id) = d.by_conn.get(&(quoted_dst, 0, sport))
                && let Some(job) = jobs[id].as_mut()
                && let Current::Hops(h) = &mut job.current
            {
                h.on_time_exceeded(from, quoted_dst, quoted_ident);
            }
        }
        // Timers, transmissions, next steps.
        let mut wake = now + Duration::from_millis(50);
        for (id, slot) in jobs.iter_mut().enumerate() {
            let Some(job) = slot.as_mut() else { continue };
            if job.sport == 0 && !job.finished {
                // Waiting for a free port.
                d.start(now, id, job);
            }
            loop {
                match &mut job.current {
                    Current::Tcp(x) => {
                        if x.poll_timeout().is_some_and(|t| t <= now) {
                            x.on_timeout(now);
                        }
                        job.pending.extend(std::iter::from_fn(|| x.poll_transmit()));
                        if x.outcome().is_none() {
                            wake = wake.min(x.poll_timeout().unwrap_or(wake));
                            break;
                        }
                    }
                    Current::Hops(h) => {
                        if h.poll_timeout().is_some_and(|t| t <= now) {
                            h.on_timeout(now);
                        }
                        job.pending.extend(std::iter::from_fn(|| h.poll_transmit()));
                        if h.result().is_none() {
                            wake = wake.min(h.poll_timeout().unwrap_or(wake));
                            break;
                        }
                    }
                    Current::None => break,
                }
                d.advance(now, id, job);
            }
            while let Some(p) = job.pending.front() {
                match limiter.try_send(now, job.target.addr) {
                    Ok(()) => {
                        match sockets.send(p) {
                            Ok(()) => packets += 1,
                            // A full send buffer or an unreachable route: the
                            // state machines retransmit, as for a lost packet.
                            Err(e)
                                if matches!(
                                    e.raw_os_error(),
                                    Some(
                                        libc::ENOBUFS
                                            | libc::EAGAIN
                                            | libc::EHOSTUNREACH
                                            | libc::ENETUNREACH
                                            | libc::EPERM
                                    )
                                ) => {}
                            Err(e) => return Err(SurveyError::Io(e)),
                        }
                        job.pending.pop_front();
                    }
                    Err(wait) => {
                        wake = wake.min(now + wait);
                        break;
                    }
                }
            }
            if job.finished && job.pending.is_empty() {
                let rec = record(job, now, opts.fragments);
                let mut line = serde_json::to_string(&rec).expect("a record serialises");
                line.push('\n');
                file.write_all(line.as_bytes()).map_err(output_err)?;
                *slot = None;
                free.push(id);
                active -= 1;
                done += 1;
            }
        }
        if now - last_progress >= Duration::from_millis(500) {
            last_progress = now;
            progress(Progress { done, total, elapsed: now });
        }
        if now - last_forget >= Duration::from_secs(5) {
            last_forget = now;
            limiter.forget_idle(now);
        }
        let now = clock.elapsed();
        if wake > now {
            sockets.wait(wake - now);
        }
    }
    progress(Progress { done, total, elapsed: clock.elapsed() });
    Ok(RunSummary { surveyed: done, skipped, elapsed: clock.elapsed(), interrupted, packets })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_namespace_is_pid_1s_or_an_unnamed_one() {
        assert!(is_host_namespace(7, Some(7), &[]));
        assert!(!is_host_namespace(8, Some(7), &[]));
        assert!(!is_host_namespace(8, None, &[5, 8]), "a namespace of `ip netns`");
        assert!(is_host_namespace(7, None, &[5, 8]), "PID 1 hidden and not a named namespace: assume the host's");
        assert!(is_host_namespace(7, None, &[]));
    }
}
