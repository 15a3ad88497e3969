//! `px lab parallel` — paper Table 1: the server's CPU for N download
//! sessions of one connection at MTU 9000 vs six parallel connections at
//! MTU 1500 each, all fetching the same file.
//!
//! Topology: a server and a client namespace joined by one veth whose MTU
//! is 9000 for the single-connection sessions and 1500 for the parallel
//! ones. The server is [`http::HttpServer`] (a small static file
//! server in this process, every thread pinned to the last CPU, the
//! server's receive queue steered there by RPS); the client runs N `axel`
//! processes at once (`-n 1` or `-n 6`) on CPU 0. The server sends
//! MTU-sized segments (TSO/GSO off): a veth with TSO would carry 64 KB
//! super-packets whatever the MTU, as no wire does; the client has GRO on.
//!
//! Server CPU, stated in every result: its threads' time (`RUSAGE_THREAD`,
//! added up as each ends) plus the softirq and irq time of its CPU during
//! the downloads (`/proc/stat`: its receive queue's processing and what of
//! its transmit path runs in softirq), per GB served; the threads' time
//! alone and the CPU's busy fraction beside it. Other softirq work on that
//! CPU would count too.

pub mod http;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Instant;

use serde::Serialize;

use px_netns::netns::{LabChild, Offloads};
use px_netns::topology::Topology;

use http::{HttpServer, PATH};
use px_netns::Machine;
use px_netns::cpu::{self, CpuTimes, REST_CPU};

use crate::exp::{Paper, Report, ratio};

/// What the paper reports.
pub const PAPER: Paper = Paper {
    figure: "Table 1",
    reports: "server CPU, 1 conn. at 9 KB vs 6 conn. at 1500 B (axel): 20.2 vs 19.5 % (1 session), 22.1 vs 34.5 % \
              (10), 34.7 vs 100 % (100): up to 2.88×",
};

/// The paper's Table 1: (sessions, 1 conn. 9000 %, 6 conn. 1500 %).
pub const PAPER_TABLE: [(u64, f64, f64); 3] = [(1, 20.20, 19.52), (10, 22.12, 34.53), (100, 34.72, 100.0)];

/// What to run: the flags of `px lab parallel` (their defaults are
/// [`Default`]'s).
#[derive(Debug, Clone, clap::Args)]
pub struct ParallelOptions {
    /// Concurrent download sessions, comma-separated (each 1..=256; the
    /// paper's 1, 10, 100 scaled to a 2-core machine).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub sessions: Vec<u64>,
    /// Size of the file each session downloads (MB).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub file_mb: u64,
    /// Connections of a parallel session (axel -n).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(2..=32))]
    pub connections: u64,
    /// TCP congestion control of the hosts, set per socket (see `px lab wan --help` on why cubic).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
}

crate::exp::defaults_from_flags!(ParallelOptions);

/// One configuration at one session count.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerCpu {
    /// Connections per session.
    pub connections: u64,
    /// Link MTU.
    pub mtu: u32,
    /// From the first session's start to the last one's end.
    pub seconds: f64,
    /// Aggregate download throughput (Gbit/s).
    pub gbps: f64,
    /// Server CPU seconds: its threads' time plus its CPU's softirq and irq time.
    pub server_cpu_s: f64,
    /// Of which the server threads' own (process-context) time.
    pub server_threads_cpu_s: f64,
    /// Server CPU seconds per GB served.
    pub server_cpu_s_per_gb: f64,
    /// The threads' own CPU seconds per GB (without the softirq work).
    pub server_threads_cpu_s_per_gb: f64,
    /// Busy fraction of the server's CPU.
    pub server_core_busy: f64,
    /// Sessions that failed (axel exit status).
    pub failed_sessions: u64,
}

/// One session count.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelRow {
    /// Concurrent sessions.
    pub sessions: u64,
    /// One connection per session, MTU 9000.
    pub single_9000: ServerCpu,
    /// `connections` per session, MTU 1500.
    pub parallel_1500: ServerCpu,
    /// Server CPU per GB, parallel / single.
    pub cpu_ratio: f64,
}

/// The result of `px lab parallel`.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelResult {
    /// One row per session count.
    pub rows: Vec<ParallelRow>,
    /// File size per session (MB).
    pub file_mb: u64,
    /// How server CPU is accounted.
    pub accounting: String,
    /// Offloads, as text.
    pub offloads: String,
    /// Congestion control of the namespaces (their default).
    pub congestion_control: String,
    /// The machine.
    pub machine: Machine,
    /// What the paper reports.
    pub paper: Paper,
}

const OFFLOADS: &str = "server: tso/gso off (MTU-sized segments); client: gro on";
const SRV: &str = "px-ps0";
const CLI: &str = "px-pc0";
const PORT: u16 = 8080;

/// Runs the experiment; `say` gets a line of progress at each step.
pub fn run(o: &ParallelOptions, say: &dyn Fn(&str)) -> Result<ParallelResult, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(|e| e.to_string())?;
    let machine = Machine::current();
    let e = |e: px_netns::LabError| e.to_string();
    say("px lab parallel: building server — client in fresh namespaces…");
    let mut topo = Topology::new().map_err(e)?;
    let srv = topo.add_ns("psrv").map_err(e)?;
    let cli = topo.add_ns("pcli").map_err(e)?;
    topo.add_veth((srv, SRV), (cli, CLI), 1500).map_err(e)?;
    let (s, c) = (topo.ns(srv), topo.ns(cli));
    s.set_offloads(SRV, Offloads { tso: Some(false), gso: Some(false), gro: Some(false) }).map_err(e)?;
    c.set_offloads(CLI, Offloads { gro: Some(true), ..Offloads::default() }).map_err(e)?;
    s.add_addr(SRV, &format!("{}/24", px_netns::line::RIGHT_V4)).map_err(e)?;
    c.add_addr(CLI, &format!("{}/24", px_netns::line::LEFT_V4)).map_err(e)?;
    let scpu = cpu::rx_cpu();
    cpu::steer_rx(s, SRV, scpu)?;
    cpu::steer_rx(c, CLI, REST_CPU)?;
    remove_stale_dirs();
    let dir = std::path::PathBuf::from(format!("{SHM}/{DIR_PREFIX}{}", std::process::id()));
    px_netns::cleanup::register_path(&dir);
    let _rm = RemoveDir(dir.clone());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let size = o.file_mb << 20;
    let addr: SocketAddr = format!("{}:{PORT}", px_netns::line::RIGHT_V4).parse().map_err(|e| format!("{e}"))?;
    let url = format!("http://{addr}{PATH}");
    let mut rows = Vec::new();
    for &n in &o.sessions {
        let one = |conns: u64, mtu: u32| -> Result<ServerCpu, String> {
            say(&format!("px lab parallel: {n} session(s) of {conns} connection(s) at MTU {mtu}…"));
            s.set_mtu(SRV, mtu).map_err(e)?;
            c.set_mtu(CLI, mtu).map_err(e)?;
            let server = HttpServer::start(s, addr, size, scpu, &o.cc)?;
            let t0 = CpuTimes::now();
            let start = Instant::now();
            let mut kids = Vec::new();
            for i in 0..n {
                let out = dir.join(format!("s{i}"));
                let mut cmd = c.command("taskset");
                cmd.args(["-c", &REST_CPU.to_string(), "axel", "-q", "-N", "-n", &conns.to_string(), "-o"])
                    .arg(&out)
                    .arg(&url)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                kids.push(LabChild::spawn(&mut cmd).map_err(e)?);
            }
            let failed = kids
                .into_iter()
                .map(|k| k.wait_with_output().map(|o| !o.status.success()).unwrap_or(true))
                .filter(|f| *f)
                .count() as u64;
            let seconds = start.elapsed().as_secs_f64();
            let u = t0.since(scpu);
            let (threads, bytes) = server.stop();
            for i in 0..n {
                let _ = std::fs::remove_file(dir.join(format!("s{i}")));
                let _ = std::fs::remove_file(dir.join(format!("s{i}.st")));
            }
            let gbytes = bytes as f64 / 1e9;
            Ok(ServerCpu {
                connections: conns,
                mtu,
                seconds,
                gbps: ratio(gbytes * 8.0, seconds),
                server_cpu_s: u.host_seconds(threads),
                server_threads_cpu_s: threads,
                server_cpu_s_per_gb: ratio(u.host_seconds(threads), gbytes),
                server_threads_cpu_s_per_gb: ratio(threads, gbytes),
                server_core_busy: u.busy(),
                failed_sessions: failed,
            })
        };
        let single = one(1, 9000)?;
        let par = one(o.connections, 1500)?;
        rows.push(ParallelRow {
            sessions: n,
            cpu_ratio: ratio(par.server_cpu_s_per_gb, single.server_cpu_s_per_gb),
            single_9000: single,
            parallel_1500: par,
        });
    }
    drop(topo);
    Ok(ParallelResult {
        rows,
        file_mb: o.file_mb,
        accounting: format!(
            "the server's threads (all pinned to CPU {scpu}; RUSAGE_THREAD) plus CPU {scpu}'s softirq + irq time \
             (/proc/stat: its receive queue, steered there by RPS, and its transmit path) while the sessions ran; \
             clients, axel and their receive queue on CPU {REST_CPU}"
        ),
        offloads: OFFLOADS.into(),
        congestion_control: format!("{} on the server's sockets (TCP_CONGESTION)", o.cc),
        machine,
        paper: PAPER,
    })
}

/// Where the downloads go (memory, not disk), one directory per run.
const SHM: &str = "/dev/shm";
const DIR_PREFIX: &str = "px-lab-parallel-";

/// A run killed by SIGKILL leaves its download directory (SIGINT/SIGTERM
/// remove it through the signal cleanup): the next run removes it once its
/// process is gone.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(SHM) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(DIR_PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Removes a directory and its contents on drop.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        px_netns::cleanup::unregister_path(&self.0);
    }
}

impl Report for ParallelResult {
    fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "px lab parallel — {} ({})", PAPER.figure, PAPER.reports);
        let _ = writeln!(s, "{}", self.machine.line());
        let _ = writeln!(s, "each session downloads the same {} MB file (axel, own HTTP server)", self.file_mb);
        let _ = writeln!(s, "server CPU: {}", self.accounting);
        let _ = writeln!(s, "offloads: {}; congestion control: {}\n", self.offloads, self.congestion_control);
        let _ = writeln!(
            s,
            "{:>8} | {:>9} {:>9} {:>8} {:>5} | {:>9} {:>9} {:>8} {:>5} | {:>7} | paper (1 conn / 6 conn)",
            "sessions",
            "1c9000 Gb",
            "CPU s/GB",
            "thr s/GB",
            "busy",
            "6c1500 Gb",
            "CPU s/GB",
            "thr s/GB",
            "busy",
            "ratio"
        );
        for r in &self.rows {
            let (a, b) = (&r.single_9000, &r.parallel_1500);
            let paper = PAPER_TABLE
                .iter()
                .find(|p| p.0 == r.sessions)
                .map_or("-".to_string(), |p| format!("{:.1} / {:.1} % = {:.2}×", p.1, p.2, p.2 / p.1));
            let _ = writeln!(
                s,
                "{:>8} | {:>9.2} {:>9.3} {:>8.3} {:>4.0}% | {:>9.2} {:>9.3} {:>8.3} {:>4.0}% | {:>6.2}× | {paper}",
                r.sessions,
                a.gbps,
                a.server_cpu_s_per_gb,
                a.server_threads_cpu_s_per_gb,
                100.0 * a.server_core_busy,
                b.gbps,
                b.server_cpu_s_per_gb,
                b.server_threads_cpu_s_per_gb,
                100.0 * b.server_core_busy,
                r.cpu_ratio
            );
            if a.failed_sessions + b.failed_sessions > 0 {
                let _ = writeln!(s, "         ! failed sessions: {} / {}", a.failed_sessions, b.failed_sessions);
            }
        }
        let paper: Vec<String> = PAPER_TABLE.iter().map(|p| format!("{} → {:.2}×", p.0, p.2 / p.1)).collect();
        let _ = writeln!(s, "paper, 6 conn. / 1 conn. CPU by sessions: {}", paper.join(", "));
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{BarChart, stack};
        let cats: Vec<String> = self.rows.iter().map(|r| format!("{} session(s)", r.sessions)).collect();
        let cpu = BarChart {
            title: format!(
                "Server CPU per GB: 1 connection at 9000 vs {} at 1500",
                self.rows.first().map_or(6, |r| r.parallel_1500.connections)
            ),
            y_label: "CPU s / GB".into(),
            categories: cats,
            series: vec![
                ("1 conn., MTU 9000".into(), self.rows.iter().map(|r| r.single_9000.server_cpu_s_per_gb).collect()),
                ("6 conn., MTU 1500".into(), self.rows.iter().map(|r| r.parallel_1500.server_cpu_s_per_gb).collect()),
            ],
            note: Some(self.machine.line()),
        };
        let ratios = BarChart {
            title: "Parallel / single server CPU: ours (per GB) vs the paper (Table 1, % CPU)".into(),
            y_label: "×".into(),
            categories: (0..self.rows.len().max(PAPER_TABLE.len())).map(|i| format!("scale {}", i + 1)).collect(),
            series: vec![
                ("this lab (sessions as run)".into(), self.rows.iter().map(|r| r.cpu_ratio).collect()),
                ("paper (1, 10, 100 sessions)".into(), PAPER_TABLE.iter().map(|p| p.2 / p.1).collect()),
            ],
            note: Some(format!(
                "this lab's sessions: {:?}; paper: ConnectX-7 servers, all offloads on",
                self.rows.iter().map(|r| r.sessions).collect::<Vec<_>>()
            )),
        };
        stack(&[cpu.to_svg(), ratios.to_svg()])
    }

    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
