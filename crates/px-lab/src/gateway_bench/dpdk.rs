//! `px bench gateway --datapath dpdk` (root): the gateway on DPDK against
//! DPDK's own GRO/GSO and against plain forwarding, each on the same
//! `net_memif` ports, lcore and trace.
//!
//! Every round runs two processes in a fresh, empty network namespace
//! (memif's control sockets are abstract Unix sockets, which live in the
//! namespace: nothing on disk): the forwarder under test, pinned with
//! `taskset` and EAL `-l` to the forwarding CPU, as the memif server on its
//! two ports; and `px_dpdk_gen` (`bench/dpdk/`), the generator and sink,
//! pinned to the other CPU as the zero-copy memif client of both ports. The
//! forwarder is one of:
//! - `limit`: `px_dpdk_fwd --mode io`, plain I/O forwarding (the ceiling);
//! - `px`: `px gateway --datapath dpdk`;
//! - `baseline`: `px_dpdk_fwd --mode gro`, DPDK GRO inbound (merges cut back
//!   to the inner MTU) and GSO outbound.
//!
//! Rounds are interleaved: each repeat runs every trace with every
//! forwarder, the forwarders' order rotating from one repeat to the next.
//! No hugepages: EAL runs with `--no-huge --no-shconf` (memif zero copy on
//! the generator's side with `--single-file-segments`, which `--no-huge`
//! memory backs with a memfd).
//!
//! Stop order matters: DPDK 22.11's memif unmaps a port's shared memory on
//! its interrupt thread when the peer disconnects, while the lcore may be
//! inside `rx_burst` (a crash we saw). So the generator prints its figures
//! and waits (`--linger`, not polling); the forwarder is stopped with
//! SIGTERM first; then the generator's stdin is closed and it exits.
//!
//! Nothing is left behind, on every exit path (the [`Netns`] and
//! [`LabChild`] guards and the signal cleanup): no processes, no namespace,
//! no trace files, and no `/var/run/dpdk/<file-prefix>` directory (EAL
//! creates one even with `--no-shconf`; the tools remove theirs, and a
//! round removes what a killed process left).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use px_bench::vs_dpdk::gateway::{Forwarder, GenReport, Report, RoundRun, Setup, TraceFiles, TraceKind, TraceSizes};
use px_bench::vs_dpdk::paced::AtOnce;
use px_bench::vs_dpdk::{repo_and_target, tool};

use px_netns::cleanup::{register_path, unregister_path};
use px_netns::cpu::{self, REST_CPU};
use px_netns::line::{EMTU, IMTU};
use px_netns::{LabChild, LabError, Netns};

/// The merge timeout both merging forwarders hold segments for (px's default).
const HOLD_US: u64 = 500;
/// EAL's runtime directories live under here (as root).
const RUNTIME_ROOT: &str = "/var/run/dpdk";

static ROUND: AtomicU64 = AtomicU64::new(0);

/// What `px bench gateway --datapath dpdk` runs.
#[derive(Debug, Clone)]
pub struct DpdkBenchOptions {
    /// The `px` binary (run as `px gateway --datapath dpdk`).
    pub exe: PathBuf,
    /// Seconds each round sends data.
    pub seconds: f64,
    /// Repeats of every round (interleaved).
    pub repeats: u32,
    pub sizes: TraceSizes,
    /// The forwarding CPU (default: the last one); the generator gets another.
    pub cpu: Option<usize>,
    /// Which forwarders, on which traces.
    pub forwarders: Vec<Forwarder>,
    pub traces: Vec<TraceKind>,
    /// The generator checks the checksums of every Nth frame that arrives
    /// on a port (1: every frame; 0: none).
    pub verify_every: u32,
    /// How many flows the generator sends at once (see
    /// [`px_bench::vs_dpdk::paced`]): fitted to the forwarder's pace by
    /// default, so that every flow moves at its trace rate.
    pub at_once: AtOnce,
}

/// Why `px bench gateway --datapath dpdk` could not run.
#[derive(Debug, thiserror::Error)]
pub enum DpdkBenchError {
    /// Namespaces need root.
    #[error("px bench gateway --datapath dpdk needs root (network namespaces)")]
    NotRoot,
    /// Fewer than two CPUs: the generator and the forwarder need one each.
    #[error("px bench gateway --datapath dpdk needs two CPUs (the generator and the forwarder each get one)")]
    OneCpu,
    /// DPDK (or a C compiler) is not installed: the benchmark is skipped.
    #[error("{0}")]
    DpdkMissing(String),
    /// The namespace or a command in it failed.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// Writing the traces or a process's files failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The generator's memif ports did not connect to the forwarder's
    /// (seen under load with DPDK 22.11's zero-copy client): the round is
    /// run again once.
    #[error("{forwarder} round on the {trace} trace: the ports did not connect: {reason}")]
    NotConnected {
        /// The round's forwarder.
        forwarder: &'static str,
        /// The round's trace.
        trace: &'static str,
        /// Both processes' last words.
        reason: String,
    },
    /// A forwarder or the generator failed to start, or to finish.
    #[error("{forwarder} round on the {trace} trace: {reason}")]
    Round {
        /// The round's forwarder.
        forwarder: &'static str,
        /// The round's trace.
        trace: &'static str,
        /// What went wrong, with the process's last words.
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DpdkBenchError + '_ {
    move |source| DpdkBenchError::Io { path: path.display().to_string(), source }
}

/// A directory removed when dropped (and on SIGINT/SIGTERM).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Result<TempDir, DpdkBenchError> {
        let p = std::env::temp_dir().join(name);
        register_path(&p);
        std::fs::create_dir_all(&p).map_err(io_err(&p))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        unregister_path(&self.0);
    }
}

/// EAL's runtime directory of one process (`--file-prefix`): removed when
/// dropped, with `/var/run/dpdk` when that is left empty.
struct RuntimeDir(PathBuf);

impl RuntimeDir {
    fn new(prefix: &str) -> RuntimeDir {
        let p = Path::new(RUNTIME_ROOT).join(prefix);
        register_path(&p);
        RuntimeDir(p)
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        unregister_path(&self.0);
        // Fails while another process's directory is in it: then it stays.
        let _ = std::fs::remove_dir(RUNTIME_ROOT);
    }
}

/// A DPDK process of a round: output in files, killed when dropped.
struct DpdkProc {
    child: LabChild,
    pid: u32,
    stdout: PathBuf,
    stderr: PathBuf,
    _runtime: RuntimeDir,
}

impl DpdkProc {
    fn spawn(
        ns: &Netns,
        cpu: usize,
        program: &Path,
        args: &[OsString],
        files: (PathBuf, PathBuf),
        stdin: Stdio,
        prefix: &str,
    ) -> Result<DpdkProc, String> {
        let runtime = RuntimeDir::new(prefix);
        let (stdout, stderr) = files;
        let out = std::fs::File::create(&stdout).map_err(|e| format!("{}: {e}", stdout.display()))?;
        let err = std::fs::File::create(&stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
        let mut c: Command = ns.command("taskset");
        c.arg("-c").arg(cpu.to_string()).arg(program).args(args).stdin(stdin).stdout(out).stderr(err);
        let child = LabChild::spawn(&mut c).map_err(|e| e.to_string())?;
        let pid = child.id().ok_or("no pid")?;
        Ok(DpdkProc { child, pid, stdout, stderr, _runtime: runtime })
    }

    fn stderr_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(6)..].join(" | ")
    }

    /// SIGTERM, then wait up to 10 s (then SIGKILL); true if it exited by itself.
    fn stop(&mut self) -> bool {
        // SAFETY: kill(2) on the PID of our own child, not yet reaped (its
        // LabChild guard is alive), so it cannot name another process.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while !self.child.has_exited() {
            if t0.elapsed() > Duration::from_secs(10) {
                self.child.kill_and_reap();
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// CPU seconds of each of its threads now.
    fn thread_times(&self) -> HashMap<u32, f64> {
        let mut m = HashMap::new();
        let Ok(dir) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else { return m };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        for e in dir.filter_map(Result::ok) {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
            let Some((_, rest)) = stat.rsplit_once(')') else { continue };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            m.insert(tid, (t(11) + t(12)) / hz);
        }
        m
    }
}

/// The busiest thread's CPU time between two readings, over `wall` seconds.
fn busiest_share(before: &HashMap<u32, f64>, after: &HashMap<u32, f64>, wall: f64) -> f64 {
    let used = after.iter().map(|(tid, t)| t - before.get(tid).copied().unwrap_or(0.0)).fold(0.0, f64::max);
    used / wall.max(1e-9)
}

/// The forwarder's busy share from its stats: `busy_share` (px_dpdk_fwd:
/// cycles in iterations that moved a frame, over the cycles from the
/// first frame moved to the last), or the same from the sums of every
/// `busy_ns` and `active_ns` in it (px gateway's `--stats-file`; `loop_ns`,
/// the whole loop, where `active_ns` is missing).
fn busy_share(stats: &serde_json::Value) -> Option<f64> {
    fn sum(v: &serde_json::Value, key: &str) -> f64 {
        match v {
            serde_json::Value::Object(m) => {
                m.iter().map(|(k, x)| if k == key { x.as_f64().unwrap_or(0.0) } else { sum(x, key) }).sum()
            }
            serde_json::Value::Array(a) => a.iter().map(|x| sum(x, key)).sum(),
            _ => 0.0,
        }
    }
    if let Some(b) = stats["busy_share"].as_f64() {
        return Some(b);
    }
    let active = sum(stats, "active_ns");
    let run = if active > 0.0 { active } else { sum(stats, "loop_ns") };
    (run > 0.0).then(|| sum(stats, "busy_ns") / run)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_owned()
}

fn load_1m(s: &str) -> f64 {
    s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// DPDK GRO's items per flow for a trace of `flows` flows: 4 (the
/// harness's fair setting), or more so that the table holds 1024 items,
/// what arrives in one 500 µs flush period at 2 Mpps.
fn gro_items_per_flow(flows: usize) -> usize {
    1024usize.div_ceil(flows.max(1)).clamp(4, 1024)
}

/// A pipe: (read end, write end), both close-on-exec (the child's stdin
/// is a copy made for it).
fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid 2-int array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and ours alone.
    Ok(unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) })
}

/// EAL arguments every process of a round shares.
fn eal(cpu: usize, prefix: &str) -> Vec<OsString> {
    ["-l", &cpu.to_string(), "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry", "--log-level=4"]
        .iter()
        .map(OsString::from)
        .chain([format!("--file-prefix={prefix}").into()])
        .collect()
}

/// The two memif ports of a round, as (server, client) `--vdev` values.
fn vdevs(tag: &str, role: &str, extra: &str) -> [OsString; 2] {
    ["o", "i"].map(|side| {
        let i = usize::from(side == "i");
        format!("--vdev=net_memif{i},role={role},id=0,socket=px-dpdkb-{tag}-{side},socket-abstract=yes{extra}").into()
    })
}

struct Bench<'a> {
    o: &'a DpdkBenchOptions,
    ns: Netns,
    dir: TempDir,
    traces: TraceFiles,
    fwd_tool: PathBuf,
    gen_tool: PathBuf,
    fwd_cpu: usize,
    gen_cpu: usize,
    absent: Vec<(Forwarder, String)>,
}

impl Bench<'_> {
    fn forwarder_args(&self, f: Forwarder, trace: TraceKind, tag: &str, stats: &Path) -> (PathBuf, Vec<OsString>) {
        let prefix = format!("px-dpdkb-{tag}-fwd");
        let mut a = eal(self.fwd_cpu, &prefix);
        a.extend(["-m".into(), "512".into()]);
        a.extend(vdevs(tag, "server", ""));
        a.push("--".into());
        match f {
            Forwarder::Limit | Forwarder::Baseline => {
                let mode = if f == Forwarder::Limit { "io" } else { "gro" };
                let flows = self.traces.flows(trace).max(1);
                for (k, v) in [
                    ("--mode", mode.to_owned()),
                    ("--hold-us", HOLD_US.to_string()),
                    ("--mtu", EMTU.to_string()),
                    ("--imtu", IMTU.to_string()),
                    // DPDK GRO's table: every flow of the trace, with room
                    // for reordering and ACK changes (the harness's fair
                    // setting), and at least what arrives in one flush
                    // period: a full table passes segments unmerged (the
                    // 8-flow bulk trace with 4 items a flow: yield 0.61
                    // against 0.76 with 16).
                    ("--max-flows", flows.to_string()),
                    ("--items-per-flow", gro_items_per_flow(flows).to_string()),
                    ("--stats", stats.display().to_string()),
                ] {
                    a.push(k.into());
                    a.push(v.into());
                }
                (self.fwd_tool.clone(), a)
            }
            Forwarder::Px => {
                // `px gateway --datapath dpdk` with the same EAL arguments
                // and ports, from a configuration file (helper dpdk's keys).
                let cfg = stats.with_extension("toml");
                let quote = |v: &OsString| format!("{:?}", v.to_string_lossy());
                let eal_end =
                    a.iter().position(|x| x.to_str().is_some_and(|x| x.starts_with("--vdev"))).unwrap_or(a.len());
                let [outer, inner] = vdevs(tag, "server", "").map(|v| {
                    let v = v.to_string_lossy().into_owned();
                    format!("{:?}", v.trim_start_matches("--vdev="))
                });
                let toml = format!(
                    "datapath = \"dpdk\"\nimtu = {IMTU}\nemtu = {EMTU}\nworkers = 1\n\n[dpdk]\nouter = {outer}\n\
                     inner = {inner}\neal = [{}]\ncores = [{}]\n",
                    a[..eal_end].iter().map(quote).collect::<Vec<_>>().join(", "),
                    self.fwd_cpu
                );
                let _ = std::fs::write(&cfg, toml);
                let p = ["gateway", "--config"]
                    .map(OsString::from)
                    .into_iter()
                    .chain([cfg.into_os_string(), "--log-interval".into(), "0".into(), "--stats-file".into()])
                    .chain([stats.as_os_str().to_owned()])
                    .collect();
                (self.o.exe.clone(), p)
            }
        }
    }

    fn round(&mut self, f: Forwarder, trace: TraceKind, repeat: u32) -> Result<Option<RoundRun>, DpdkBenchError> {
        let tag = format!("{}-{}", std::process::id(), ROUND.fetch_add(1, Ordering::Relaxed));
        let err = |reason: String| DpdkBenchError::Round { forwarder: f.name(), trace: trace.name(), reason };
        let file = |name: &str| self.dir.0.join(format!("{tag}-{name}"));
        let (fwd_prog, fwd_args) = self.forwarder_args(f, trace, &tag, &file("fwd-stats.json"));
        let mut fwd = DpdkProc::spawn(
            &self.ns,
            self.fwd_cpu,
            &fwd_prog,
            &fwd_args,
            (file("fwd.out"), file("fwd.err")),
            Stdio::null(),
            &format!("px-dpdkb-{tag}-fwd"),
        )
        .map_err(err)?;
        // Its ports must be started before the generator connects (see
        // px_dpdk_gen's connect_ports): wait for the line that says so.
        let ready = match f {
            Forwarder::Px => "px gateway: inner",
            _ => "px_dpdk_fwd: mode",
        };
        let t_ready = Instant::now();
        while !std::fs::read_to_string(&fwd.stderr).unwrap_or_default().contains(ready) {
            if fwd.child.has_exited() || t_ready.elapsed() > Duration::from_secs(30) {
                let reason = format!("the forwarder did not start: {}", fwd.stderr_tail());
                if f == Forwarder::Px {
                    return Ok(self.mark_absent(f, reason));
                }
                return Err(err(reason));
            }
            std::thread::sleep(Duration::from_millis(10));
        }

        let gen_prefix = format!("px-dpdkb-{tag}-gen");
        let mut g = eal(self.gen_cpu, &gen_prefix);
        g.push("--single-file-segments".into());
        g.extend(vdevs(&tag, "client", ",zero-copy=yes"));
        g.push("--".into());
        g.push("--linger".into());
        g.extend(self.traces.gen_args(trace));
        // Plain forwarding does not translate: 9014-byte frames leave the
        // outer port as they came, so the outer side's limit is the inner MTU.
        let mtu = if f == Forwarder::Limit { IMTU } else { EMTU };
        for (k, v) in [
            ("--seconds", self.o.seconds.to_string()),
            ("--mtu", mtu.to_string()),
            ("--imtu", IMTU.to_string()),
            ("--inner-mss", (IMTU - 52).to_string()),
            ("--outer-mss", (EMTU - 52).to_string()),
            ("--verify-every", self.o.verify_every.to_string()),
            ("--at-once", self.o.at_once.gen_arg()),
        ] {
            g.push(k.into());
            g.push(v.into());
        }
        let (stdin_rd, mut stdin_wr) = pipe().map_err(|e| err(format!("pipe: {e}")))?;
        let t0 = Instant::now();
        let cpu0 = fwd.thread_times();
        let mut sink = DpdkProc::spawn(
            &self.ns,
            self.gen_cpu,
            &self.gen_tool,
            &g,
            (file("gen.out"), file("gen.err")),
            Stdio::from(stdin_rd),
            &gen_prefix,
        )
        .map_err(err)?;

        // The generator's figures: one JSON line, then it lingers.
        let deadline = Duration::from_secs_f64(self.o.seconds + 60.0);
        let text = loop {
            let s = std::fs::read_to_string(&sink.stdout).unwrap_or_default();
            if s.ends_with('\n') {
                break s;
            }
            if sink.child.has_exited() || fwd.child.has_exited() || t0.elapsed() > deadline {
                let what =
                    if fwd.child.has_exited() { "the forwarder exited" } else { "the generator gave no figures" };
                let reason = format!("{what}; forwarder: {}; generator: {}", fwd.stderr_tail(), sink.stderr_tail());
                if sink.stderr_tail().contains("did not connect") {
                    return Err(DpdkBenchError::NotConnected { forwarder: f.name(), trace: trace.name(), reason });
                }
                if f == Forwarder::Px {
                    // px without a DPDK datapath (or one that refuses
                    // these ports): that round is absent, the others run.
                    return Ok(self.mark_absent(f, reason));
                }
                return Err(err(reason));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let wall = t0.elapsed().as_secs_f64();
        let cpu_share = busiest_share(&cpu0, &fwd.thread_times(), wall);
        // Forwarder first (see the module's doc), then the generator.
        let fwd_clean = fwd.stop();
        let _ = stdin_wr.flush();
        drop(stdin_wr);
        let t_gen = Instant::now();
        while !sink.child.has_exited() && t_gen.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let generator = GenReport::parse(&text).map_err(|e| err(format!("{e}; {}", sink.stderr_tail())))?;
        if !fwd_clean {
            return Err(err(format!("the forwarder did not stop within 10 s of SIGTERM: {}", fwd.stderr_tail())));
        }
        let stats: serde_json::Value = std::fs::read_to_string(file("fwd-stats.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(serde_json::Value::Null);
        let busy_share = busy_share(&stats);
        Ok(Some(RoundRun {
            forwarder: f,
            trace,
            repeat,
            generator,
            cpu_share,
            busy_share,
            load_1m: load_1m(&load_average()),
            forwarder_stats: stats,
        }))
    }

    fn mark_absent(&mut self, f: Forwarder, reason: String) -> Option<RoundRun> {
        if !self.absent.iter().any(|(g, _)| *g == f) {
            self.absent.push((f, reason));
        }
        None
    }
}

/// Runs every round; `say` gets a line of progress at each step.
pub fn run(o: &DpdkBenchOptions, say: &dyn Fn(&str)) -> Result<Report, DpdkBenchError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(DpdkBenchError::NotRoot);
    }
    let ncpu = cpu::online_cpus();
    if ncpu < 2 {
        return Err(DpdkBenchError::OneCpu);
    }
    px_netns::install_signal_cleanup().map_err(LabError::Signal)?;
    let (repo, target) = repo_and_target();
    let fwd_tool = tool(&repo, &target, "px_dpdk_fwd").map_err(DpdkBenchError::DpdkMissing)?;
    let gen_tool = tool(&repo, &target, "px_dpdk_gen").map_err(DpdkBenchError::DpdkMissing)?;
    let fwd_cpu = o.cpu.unwrap_or(ncpu - 1);
    let gen_cpu = if fwd_cpu == REST_CPU { ncpu - 1 } else { REST_CPU };
    let dir = TempDir::new(&format!("px-dpdkb-{}", std::process::id()))?;
    let s = &o.sizes;
    say(&format!(
        "writing the traces: {} flows ({} inbound + {} outbound frames), bulk {} flows ({} frames)…",
        s.flows, s.inbound_frames, s.outbound_frames, s.bulk_flows, s.bulk_frames
    ));
    let traces = TraceFiles::write(&dir.0, s, IMTU as u16, EMTU as u16).map_err(io_err(&dir.0))?;
    let ns = Netns::new("dpdkb")?;
    let load_start = load_average();
    let mut b = Bench { o, ns, dir, traces, fwd_tool, gen_tool, fwd_cpu, gen_cpu, absent: Vec::new() };
    let mut runs = Vec::new();
    for repeat in 0..o.repeats {
        for &trace in &o.traces {
            // The forwarders' order rotates, so none always goes first.
            let n = o.forwarders.len();
            for k in 0..n {
                let f = o.forwarders[(k + repeat as usize) % n];
                if b.absent.iter().any(|(g, _)| *g == f) {
                    continue;
                }
                say(&format!("repeat {}/{}: {} on the {} trace…", repeat + 1, o.repeats, f.name(), trace.name()));
                let r = match b.round(f, trace, repeat) {
                    Err(DpdkBenchError::NotConnected { reason, .. }) => {
                        say(&format!("  the ports did not connect ({reason}); once more…"));
                        b.round(f, trace, repeat)?
                    }
                    r => r?,
                };
                if let Some(r) = r {
                    if !r.generator.moved_every_byte() {
                        say(&format!("  did not move every byte: {}", r.generator.failures.join("; ")));
                    }
                    runs.push(r);
                }
            }
        }
    }
    let dpdk_version = runs.first().map_or_else(String::new, |r: &RoundRun| r.generator.dpdk_version.clone());
    let setup = Setup {
        forwarding_cpu: fwd_cpu,
        generator_cpu: gen_cpu,
        seconds: o.seconds,
        repeats: o.repeats,
        traces: *s,
        imtu: IMTU as u16,
        emtu: EMTU as u16,
        hold_us: HOLD_US,
        io: "net_memif (the forwarder: server, copy mode; the generator: zero-copy client), EAL --no-huge".into(),
        dpdk_version,
        load_average_start: load_start,
        load_average_end: load_average(),
        order: "per repeat: every trace, with every forwarder; the forwarders' order rotates by one each repeat",
        replay: match o.at_once {
            AtOnce::Fitted => "a window of flows at a time, each for 10 ms of trace time; the window's size follows \
                               the forwarder's pace, so every flow moves at its trace rate (--at-once fit)"
                .into(),
            AtOnce::All => "every flow at once, lap after lap: each flow slowed by the forwarder's pace against the \
                            trace's (--at-once all)"
                .into(),
            AtOnce::Fixed(k) => format!("{k} flows at a time, each window for 10 ms of trace time (--at-once {k})"),
        },
        gbps: "wire frames (Ethernet header to the end of the IP packet) the generator handed to the forwarder, \
               from the first data frame sent to the last one received",
        yield_definition: "inner side: data frames whose payload is the full inner MSS (8948) / data frames \
                           (inbound, mixed, bulk); outbound: the outer side's share at the full outer MSS (1448)",
        cpu_share: "cpu_share: the forwarder's busiest thread's CPU time / wall time of the round; busy_share: the \
                    forwarder's own count of loop cycles in iterations that moved a frame (limit, baseline)",
        checks: format!(
            "every frame: its size against the side's MTU, its flow, the port it left by, its flow's payload bytes \
             (per flow, bytes out = bytes in at the end); IPv4 and TCP checksums: {}",
            match o.verify_every {
                0 => "none".to_string(),
                1 => "every frame".to_string(),
                n => format!("every {n}th frame per port"),
            }
        ),
    };
    Ok(Report { runs, absent: b.absent, setup })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_from_either_forwarder() {
        assert_eq!(busy_share(&serde_json::json!({"busy_share": 0.25, "cycles": 4})), Some(0.25));
        let px = serde_json::json!({"workers": [{"busy_ns": 1, "loop_ns": 4}, {"busy_ns": 3, "loop_ns": 4}]});
        assert_eq!(busy_share(&px), Some(0.5));
        // The span from the first frame moved to the last, where given (the
        // loop before and after it is not the forwarder's work).
        let px = serde_json::json!({"busy_ns": 3, "loop_ns": 8, "active_ns": 4});
        assert_eq!(busy_share(&px), Some(0.75));
        assert_eq!(busy_share(&serde_json::Value::Null), None);
    }

    #[test]
    fn gro_table_holds_a_flush_period() {
        assert_eq!(gro_items_per_flow(800), 4);
        assert_eq!(gro_items_per_flow(8), 128);
        assert!(gro_items_per_flow(300) * 300 >= 1024);
    }

    #[test]
    fn busiest_thread_over_wall_time() {
        let before = HashMap::from([(1, 1.0), (2, 5.0)]);
        let after = HashMap::from([(1, 1.5), (2, 6.0), (3, 0.25)]);
        assert!((busiest_share(&before, &after, 2.0) - 0.5).abs() < 1e-12);
    }
}
