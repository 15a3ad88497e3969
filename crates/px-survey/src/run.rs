//! The survey on Linux: raw sockets, the rule that keeps the kernel from
//! resetting our raw connections, the output file, and the loop that
//! drives [`crate::scheduler::Scheduler`] (which decides everything:
//! stages, retries, timers, rate limits).
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

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_io::RawIpSockets;

use crate::exchange::{HopConfig, TcpConfig};
use crate::job::{JobConfig, Prior};
use crate::record::{Resume, ResumeError};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::target::Target;

/// The longest the loop sleeps: it looks at the stop flag and the
/// progress this often.
const TICK: Duration = Duration::from_millis(50);

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
/// on drop. Its name is the marker of its owner: `px_survey_PID_START`,
/// this process's PID and start time ([`px_io::process`]), so that a table
/// left by a survey killed with SIGKILL is known as stale even after its
/// PID went to another process.
struct RstFilter {
    table: String,
}

impl RstFilter {
    fn install(ports: (u16, u16)) -> Result<RstFilter, SurveyError> {
        remove_stale_tables();
        let table = table_name(std::process::id(), px_io::process::own_start_time());
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

const TABLE_PREFIX: &str = "px_survey_";

/// The table of the survey run by process `pid`, started at `start`.
fn table_name(pid: u32, start: Option<u64>) -> String {
    match start {
        Some(s) => format!("{TABLE_PREFIX}{pid}_{s}"),
        None => format!("{TABLE_PREFIX}{pid}"),
    }
}

/// The owner a table's name records, if it is a survey's table:
/// `px_survey_PID_START`, or `px_survey_PID` (older versions).
fn table_owner(name: &str) -> Option<(u32, Option<u64>)> {
    let rest = name.strip_prefix(TABLE_PREFIX)?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match rest.split_once('_') {
        Some((pid, start)) if all_digits(pid) && all_digits(start) => {
            Some((pid.parse().ok()?, Some(start.parse().ok()?)))
        }
        None if all_digits(rest) => Some((rest.parse().ok()?, None)),
        _ => None,
    }
}

/// Whether the survey that owns table `name` is gone: its process does not
/// run (by PID and start time; a table of an older version, without the
/// start time, also when its PID now runs something else than `px`).
/// Tables that are not a survey's are never stale.
fn is_stale(name: &str, running: impl Fn(u32, Option<u64>) -> bool, command: impl Fn(u32) -> Option<String>) -> bool {
    match table_owner(name) {
        Some((pid, Some(start))) => !running(pid, Some(start)),
        Some((pid, None)) => !running(pid, None) || command(pid).is_none_or(|c| c.trim() != "px"),
        None => false,
    }
}

/// Removes the tables of surveys that were killed (no cleanup on SIGKILL)
/// in this namespace (see [`is_stale`]).
fn remove_stale_tables() {
    let Ok(out) = Command::new("nft").args(["list", "tables", "ip"]).output() else { return };
    let command = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.trim().strip_prefix("table ip ")
            && is_stale(name, px_io::process::is_running, command)
        {
            let _ = nft(&format!("delete table ip {name}\n"));
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

fn source_for(t: &Target) -> Result<Ipv4Addr, String> {
    let find = || -> io::Result<Ipv4Addr> {
        let s = UdpSocket::bind("0.0.0.0:0")?;
        s.connect(SocketAddrV4::new(t.addr, t.port))?;
        match s.local_addr()? {
            std::net::SocketAddr::V4(a) => Ok(*a.ip()),
            std::net::SocketAddr::V6(_) => Err(io::Error::other("IPv6 source")),
        }
    };
    find().map_err(|e| e.to_string())
}

/// Sends a packet the scheduler handed out. A full send buffer or an
/// unreachable route counts as a lost packet (the state machines
/// retransmit); any other error ends the run.
fn send(sockets: &RawIpSockets, p: &[u8]) -> Result<(), SurveyError> {
    match sockets.send(p) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOBUFS | libc::EAGAIN | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EPERM)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(SurveyError::Io(e)),
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

    let queue: Vec<Target> = targets.iter().filter(|t| !resume.done.contains(&t.key())).cloned().collect();
    let skipped = targets.len() - queue.len();
    // Initial sequence numbers and identifications: unpredictable per run.
    let seed = px_io::random_u64().map_err(SurveyError::Io)?;
    let cfg = SchedulerConfig {
        job: JobConfig {
            tcp: opts.tcp,
            retries: opts.retries,
            fragments: opts.fragments,
            hops: opts.hops,
            ptb_mtu: opts.ptb_mtu,
            path: opts.path.clone(),
        },
        concurrency: opts.concurrency,
        rate: opts.rate,
        per_destination: opts.per_destination,
        ports: opts.ports,
    };
    let prior = Prior { pmtud_tested: resume.pmtud_tested.clone(), paths: resume.paths.clone() };
    let mut sched = Scheduler::new(cfg, queue, seed, prior);
    let clock = Instant::now();
    let mut last_progress = Duration::ZERO;
    let mut buf = vec![0u8; 65536];
    let mut interrupted = false;
    let mut route = |t: &Target| source_for(t);
    loop {
        let now = clock.elapsed();
        if stop.load(Ordering::SeqCst) {
            interrupted = sched.has_unfinished();
            // Leave no half-open connections behind: an RST for each (at
            // most one per target in progress).
            for p in sched.abort(now) {
                let _ = sockets.send(&p);
            }
            break;
        }
        while let Some(n) = sockets.recv_tcp(&mut buf) {
            sched.handle_packet(now, &buf[..n]);
        }
        while let Some(n) = sockets.recv_icmp(&mut buf) {
            sched.handle_packet(now, &buf[..n]);
        }
        sched.handle_timeout(now, &mut route);
        while let Some(p) = sched.poll_transmit(now) {
            send(&sockets, &p)?;
        }
        while let Some(rec) = sched.poll_record() {
            let mut line = serde_json::to_string(&rec).expect("a record serialises");
            line.push('\n');
            file.write_all(line.as_bytes()).map_err(output_err)?;
        }
        if sched.is_done() {
            break;
        }
        let (done, total) = sched.progress();
        if now - last_progress >= Duration::from_millis(500) {
            last_progress = now;
            progress(Progress { done, total, elapsed: now });
        }
        let wake = sched.poll_timeout().map_or(now + TICK, |t| t.min(now + TICK));
        let now = clock.elapsed();
        if wake > now {
            sockets.wait(wake - now);
        }
    }
    let (done, total) = sched.progress();
    progress(Progress { done, total, elapsed: clock.elapsed() });
    Ok(RunSummary { surveyed: done, skipped, elapsed: clock.elapsed(), interrupted, packets: sched.packets() })
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

    /// Issue 35 item 6: a table is stale when the survey that made it is
    /// gone, by PID and start time: a PID that runs again (another
    /// process) keeps no table; a table of a live survey, or one that is
    /// not a survey's, is never touched.
    #[test]
    fn a_table_is_stale_when_its_survey_is_gone_even_if_its_pid_runs_again() {
        let running = |pid: u32, start: Option<u64>| pid == 10 && start.is_none_or(|s| s == 500);
        let command = |pid: u32| (pid == 10).then(|| "px\n".to_string());
        assert!(!is_stale("px_survey_10_500", running, command), "a live survey");
        assert!(is_stale("px_survey_10_499", running, command), "its PID runs again, another process");
        assert!(is_stale("px_survey_11_500", running, command), "dead");
        // Older tables without the start time: stale once the PID is gone
        // or runs something else than px.
        assert!(!is_stale("px_survey_10", running, command));
        assert!(is_stale("px_survey_11", running, command));
        assert!(is_stale("px_survey_10", running, |_| Some("sshd\n".into())));
        for other in ["filter", "px_survey_", "px_survey_x", "px_survey_10_x", "px_survey_10_500_1", "nat"] {
            assert!(!is_stale(other, |_, _| false, |_| None), "{other} is not a survey's table");
        }
        let me = table_name(std::process::id(), px_io::process::own_start_time());
        assert_eq!(table_owner(&me), Some((std::process::id(), px_io::process::own_start_time())));
    }

    /// The same with real tables (root, in a namespace of its own): a table
    /// named after this test's own PID but another start time (a killed
    /// survey whose PID this process got) is removed; this process's own
    /// table and a table that is not a survey's stay.
    #[test]
    fn stale_tables_are_removed_at_start() {
        if !px_netns::require_root_or_skip("stale_tables_are_removed_at_start") {
            return;
        }
        if Command::new("nft").arg("--version").output().is_err() {
            eprintln!("SKIP stale_tables_are_removed_at_start: nft is not installed");
            return;
        }
        let ns = px_netns::Netns::new("svnft").unwrap();
        let me = std::process::id();
        let start = px_io::process::own_start_time().unwrap();
        let (reused, own) = (table_name(me, Some(start + 1)), table_name(me, Some(start)));
        let tables = ns
            .run(|| {
                for t in [&reused, &own, &"unrelated".to_string()] {
                    nft(&format!("add table ip {t}\n")).unwrap();
                }
                remove_stale_tables();
                let out = Command::new("nft").args(["list", "tables", "ip"]).output().unwrap();
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
            .unwrap();
        assert!(!tables.contains(&format!("table ip {reused}\n")), "a reused PID kept its table: {tables}");
        assert!(tables.contains(&format!("table ip {own}\n")) && tables.contains("table ip unrelated\n"), "{tables}");
    }
}
