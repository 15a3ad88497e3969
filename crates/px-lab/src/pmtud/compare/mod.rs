//! The comparison of `px lab pmtud`: every path of [`standard_paths`]
//! built in namespaces, and on each, in one run: `px probe` with each
//! method, `tracepath -n` and scamper's traceroute with PMTUD (`trace -M`).
//! For each tool: the answer, the time and the packets sent.
//!
//! Fairness: before each tool the prober's learned path MTUs are flushed;
//! every tool's time is the wall-clock time of its process (started with
//! `ip netns exec`), and its packets are counted by an nftables rule on the
//! egress hook of the prober's link (every packet to the target: probes,
//! retries, traceroute probes, whatever socket sent them), so every tool is
//! measured the same way. `px probe`
//! also reports its own measurement time (first probe to answer), kept as
//! `internal_seconds`. tracepath and scamper are bounded by
//! timeouts (killed through a pidfd); a tool that times out or reaches no
//! conclusion has no answer.
//! scamper runs `trace -M` (UDP Paris traceroute, then PMTUD) on IPv4 and
//! `trace -P udp -M` on IPv6 (see below why).
//! Round trips: `px probe` reports its own (`round_trips` in its JSON: each
//! round of probes waited for, retries included). tracepath and scamper
//! send one probe at a time and wait for its answer (or its timeout)
//! before the next, so their round trips are the probes they sent, as the
//! nftables counter counts them.
//! Repetitions: each tool runs `repeat` times in a row on a path (the
//! learned path MTUs flushed before each run) and is reported by its
//! median wall time, so that one slow process start does not decide a
//! millisecond comparison; every run's time is kept. A run without an
//! answer (timed out, or gave up) is not repeated: its time is its
//! timeout, not noise. If the runs' answers differ, an inexact one is
//! reported (an answer counts as exact only if every run was).
//! Every topology is torn down before the next is built, on Ctrl-C too
//! (px-lab's guards). [`table`] and [`Row::json`] render the [`Row`]s;
//! the CLI prints them.

use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod table;

pub use table::table;

use crate::pmtud::path::{PathSpec, PmtudLab, standard_paths};
use px_netns::netns::LabChild;

/// The tools, in column order.
pub const TOOLS: [&str; 6] = ["px_auto", "px_fpmtud", "px_dplpmtud", "px_icmp", "tracepath", "scamper"];

/// How to run the comparison: the flags of `px lab pmtud`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareOptions {
    /// The `px` binary (`px fpmtud` responder, `px probe`).
    #[arg(skip)]
    pub exe: PathBuf,
    /// Only the topologies whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// Bound on each tracepath run, e.g. 10s.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = px_units::duration)]
    pub tracepath_timeout: Duration,
    /// Bound on each scamper run, e.g. 60s.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = px_units::duration)]
    pub scamper_timeout: Duration,
    /// Runs of each tool on each path, reported by the median wall time (a
    /// run without an answer is not repeated; differing answers are
    /// reported as inexact).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub repeat: u32,
}

/// One tool on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRun {
    /// Its answer, if any.
    pub pmtu: Option<u32>,
    /// Wall-clock time of its process.
    pub seconds: f64,
    /// Packets the prober sent to the target meanwhile.
    pub packets: u64,
    /// `px probe`'s own measurement time.
    pub internal_seconds: Option<f64>,
    /// Round trips waited for (see the module notes for how each tool's
    /// are counted).
    pub round_trips: Option<u64>,
    /// The method `px probe` used, or why there is no answer.
    pub note: String,
    /// Wall-clock time of every run, in order (`seconds` is their median).
    pub runs_seconds: Vec<f64>,
}

impl ToolRun {
    /// One run's figures.
    fn single(pmtu: Option<u32>, seconds: f64, packets: u64, round_trips: Option<u64>) -> ToolRun {
        ToolRun {
            pmtu,
            seconds,
            packets,
            internal_seconds: None,
            round_trips,
            note: String::new(),
            runs_seconds: vec![seconds],
        }
    }
}

/// The runs of one tool on one path as one result: the run of median wall
/// time, or, if the answers differ, the slowest run whose answer is not
/// `truth` (an answer is exact only if every run's was); `runs_seconds`
/// holds every run's time.
pub fn summarize(mut runs: Vec<ToolRun>, truth: u32) -> Option<ToolRun> {
    let times: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
    let inexact = runs.iter().any(|r| r.pmtu != Some(truth)) && runs.iter().any(|r| r.pmtu == Some(truth));
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mid = runs.len().checked_sub(1)? / 2;
    let mut r = if inexact {
        let i = runs.iter().rposition(|r| r.pmtu != Some(truth))?;
        let mut r = runs.swap_remove(i);
        r.note = format!(
            "{}{}answers differed over {} runs",
            r.note,
            if r.note.is_empty() { "" } else { "; " },
            times.len()
        );
        r
    } else {
        runs.swap_remove(mid)
    };
    r.runs_seconds = times;
    Some(r)
}

/// One path.
#[derive(Debug, Clone)]
pub struct Row {
    /// The path's name.
    pub topology: String,
    /// Its true path MTU.
    pub true_pmtu: u32,
    /// Each tool, in [`TOOLS`] order.
    pub tools: Vec<(&'static str, ToolRun)>,
}

/// The paths `only` selects (all if `None`).
pub fn selected_paths(only: Option<&str>) -> Vec<PathSpec> {
    standard_paths().into_iter().filter(|p| only.is_none_or(|o| p.name.contains(o))).collect()
}

/// Runs every tool on every selected path; `say` gets a line as each path
/// starts.
pub fn compare(o: &CompareOptions, say: &dyn Fn(&str)) -> Result<Vec<Row>, crate::RunError> {
    let paths = selected_paths(o.only.as_deref());
    if paths.is_empty() {
        return Err("no topology matches --only".into());
    }
    let exe = o.exe.to_string_lossy().into_owned();
    let mut rows = Vec::new();
    for spec in &paths {
        say(&format!("px lab pmtud: {} (true path MTU {})…", spec.name, spec.true_pmtu()));
        rows.push(run_path(spec, &exe, o).map_err(|e| format!("{}: {e}", spec.name))?);
    }
    Ok(rows)
}

fn run_path(spec: &PathSpec, exe: &str, a: &CompareOptions) -> Result<Row, String> {
    let s = |e: px_netns::LabError| e.to_string();
    let mut lab = PmtudLab::build(spec).map_err(s)?;
    // The responder's limits are raised: seven tools probe it back to back.
    let responder = lab.responder;
    lab.topology.spawn(responder, exe, &["fpmtud", "--rate", "10000", "--burst", "10000"]).map_err(s)?;
    if !lab.wait_responder_listening(Duration::from_secs(3)).map_err(s)? {
        return Err("px fpmtud did not start listening".into());
    }
    lab.warm_up().map_err(s)?;
    let target = lab.target().to_string();
    let mut tools = Vec::new();
    for tool in TOOLS {
        let mut runs = Vec::new();
        for _ in 0..a.repeat.max(1) {
            let r = run_tool(&lab, tool, spec, exe, &target, a)?;
            let answered = r.pmtu.is_some();
            runs.push(r);
            if !answered {
                break;
            }
        }
        tools.push((tool, summarize(runs, spec.true_pmtu()).ok_or("no run")?));
    }
    Ok(Row { topology: spec.name.clone(), true_pmtu: spec.true_pmtu(), tools })
}

/// One run of `tool` on the lab's path, after flushing what the prober
/// learned.
fn run_tool(
    lab: &PmtudLab,
    tool: &str,
    spec: &PathSpec,
    exe: &str,
    target: &str,
    a: &CompareOptions,
) -> Result<ToolRun, String> {
    let s = |e: px_netns::LabError| e.to_string();
    lab.forget_learned_pmtu().map_err(s)?;
    let tx0 = lab.packets_to_target().map_err(s)?;
    let owned = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let (args, bound) = match tool {
        "tracepath" => (owned(&["tracepath", "-n", target]), a.tracepath_timeout),
        "scamper" => {
            // scamper's default method (UDP Paris traceroute) gets no
            // answer at all over IPv6 here (scamper 20211212, even on a
            // plain path); plain UDP traceroute works, so IPv6 uses it.
            let cmd = if spec.ipv6 { "trace -P udp -M" } else { "trace -M" };
            (owned(&["scamper", "-c", cmd, "-i", target]), a.scamper_timeout)
        }
        px => {
            let method = px.trim_start_matches("px_");
            (owned(&[exe, "probe", target, "--method", method, "--json", "--timeout", "20s"]), Duration::from_secs(25))
        }
    };
    let started = Instant::now();
    let out = run_bounded(lab, &args, bound)?;
    let seconds = started.elapsed().as_secs_f64();
    let packets = lab.packets_to_target().map_err(s)?.saturating_sub(tx0);
    let mut r = match tool {
        "tracepath" => ToolRun::single(parse_tracepath(&out), seconds, packets, Some(packets)),
        "scamper" => ToolRun::single(parse_scamper(&out, target), seconds, packets, Some(packets)),
        _ => parse_px(&out, seconds, packets),
    };
    if r.pmtu.is_none() && r.note.is_empty() {
        r.note = if started.elapsed() >= bound { "timed out".into() } else { "no answer".into() };
    }
    Ok(r)
}

/// Runs `args` in the prober's namespace, killed after `bound`; its stdout.
///
/// The tool is the process px-lab registers (`ip netns exec` execs it), so
/// the lab's SIGINT/SIGTERM cleanup kills the tool itself: a wrapper such as
/// `timeout(1)` would be killed instead and leave the tool running as an
/// orphan in a deleted namespace. The bound is enforced through a pidfd,
/// which cannot hit another process if the tool was already reaped.
fn run_bounded(lab: &PmtudLab, args: &[String], bound: Duration) -> Result<String, String> {
    let (program, rest) = args.split_first().ok_or("empty command")?;
    let mut cmd = lab.prober_ns().command(program);
    cmd.args(rest).stdout(Stdio::piped()).stderr(Stdio::null()).stdin(Stdio::null());
    let child = LabChild::spawn(&mut cmd).map_err(|e| e.to_string())?;
    let pid = child.id().ok_or("child without a pid")?;
    // SAFETY: pidfd_open(2) on the pid of our own unreaped child.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        drop(child); // kills and reaps it
        return Err(format!("pidfd_open: {e}"));
    }
    // SAFETY: a fresh descriptor returned by pidfd_open, owned here.
    let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw as libc::c_int) };
    let waiter = std::thread::spawn(move || child.wait_with_output());
    let mut p = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(bound.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd; a pidfd turns readable when the process exits.
    let ready = unsafe { libc::poll(&raw mut p, 1, ms) };
    if ready == 0 {
        // SAFETY: pidfd_send_signal(2) on our child's pidfd; fails
        // harmlessly (ESRCH) if it exited in the meantime.
        unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<u8>(), 0)
        };
    }
    let out = waiter.join().map_err(|_| "waiting for the tool panicked")?.map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `px probe --json` output: the path MTU and its own measurement time.
pub fn parse_px(out: &str, seconds: f64, packets: u64) -> ToolRun {
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or(serde_json::Value::Null);
    ToolRun {
        internal_seconds: v["seconds"].as_f64(),
        note: v["method"].as_str().map(str::to_owned).unwrap_or_else(|| "no output (not applicable?)".into()),
        ..ToolRun::single(
            v["pmtu"].as_u64().and_then(|p| u32::try_from(p).ok()),
            seconds,
            packets,
            v["round_trips"].as_u64(),
        )
    }
}

/// The path MTU from `tracepath -n` output: the `Resume: pmtu N hops H`
/// line, printed when the destination was reached (without `hops` the
/// destination was not reached and the MTU is only that of a prefix).
fn parse_tracepath(out: &str) -> Option<u32> {
    let line = out.lines().find(|l| l.trim_start().starts_with("Resume:"))?;
    let mut w = line.split_whitespace();
    let mut pmtu = None;
    let mut reached = false;
    while let Some(t) = w.next() {
        match t {
            "pmtu" => pmtu = w.next().and_then(|v| v.parse().ok()),
            "hops" => reached = true,
            _ => {}
        }
    }
    pmtu.filter(|_| reached)
}

/// The path MTU from scamper's `trace -M` text output: the `[mtu: N]`
/// (or inferred `[*mtu: N]`) annotation of the hop line of the destination.
fn parse_scamper(out: &str, target: &str) -> Option<u32> {
    out.lines().rev().find_map(|l| {
        let mut w = l.split_whitespace();
        let _hop: u32 = w.next()?.parse().ok()?;
        if w.next()? != target {
            return None;
        }
        let start = l.find("mtu: ")? + "mtu: ".len();
        let rest = &l[start..];
        let end = rest.find(']')?;
        rest[..end].trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEPATH_OK: &str = " 1?: [LOCALHOST]                      pmtu 9000
 1:  198.51.100.2                                          0.063ms 
 1:  198.51.100.2                                          0.004ms 
 2:  198.51.100.2                                          0.042ms pmtu 1500
 2:  198.51.100.18                                         0.019ms 
 3:  198.51.100.18                                         0.004ms pmtu 1400
 3:  198.51.100.34                                         0.016ms reached
     Resume: pmtu 1400 hops 3 back 3 
";

    fn run(pmtu: Option<u32>, seconds: f64) -> ToolRun {
        ToolRun::single(pmtu, seconds, 3, Some(3))
    }

    #[test]
    fn repeated_runs_are_reported_by_their_median_time() {
        let r = summarize(vec![run(Some(1400), 0.003), run(Some(1400), 0.001), run(Some(1400), 0.002)], 1400).unwrap();
        assert_eq!((r.pmtu, r.seconds), (Some(1400), 0.002));
        assert_eq!(r.runs_seconds, vec![0.003, 0.001, 0.002]);
        let one = summarize(vec![run(None, 10.0)], 1400).unwrap();
        assert_eq!((one.pmtu, one.seconds, one.runs_seconds.len()), (None, 10.0, 1));
        assert!(summarize(Vec::new(), 1400).is_none());
    }

    #[test]
    fn an_answer_is_exact_only_if_every_run_was() {
        // The wrong run is reported, though the median run was exact.
        let runs = vec![run(Some(1400), 0.001), run(Some(1399), 0.002), run(Some(1400), 0.003), run(None, 0.004)];
        let r = summarize(runs, 1400).unwrap();
        assert_eq!(r.pmtu, None, "the slowest inexact run: {r:?}");
        assert!(r.note.contains("answers differed over 4 runs"), "{r:?}");
        let r = summarize(vec![run(Some(1400), 0.001), run(Some(1399), 0.002), run(Some(1400), 0.003)], 1400).unwrap();
        assert_eq!((r.pmtu, r.seconds), (Some(1399), 0.002));
        // All wrong alike: the median, no note.
        let r = summarize(vec![run(Some(1399), 0.003), run(Some(1399), 0.001), run(Some(1399), 0.002)], 1400).unwrap();
        assert_eq!((r.pmtu, r.seconds, r.note.as_str()), (Some(1399), 0.002, ""));
    }

    #[test]
    fn tracepath_reached() {
        assert_eq!(parse_tracepath(TRACEPATH_OK), Some(1400));
    }

    #[test]
    fn tracepath_not_reached_or_killed() {
        let partial = " 1?: [LOCALHOST]                      pmtu 9000
 1:  198.51.100.2                                          0.063ms 
 2:  no reply
     Too many hops: pmtu 9000
     Resume: pmtu 9000 
";
        assert_eq!(parse_tracepath(partial), None);
        let killed = " 1?: [LOCALHOST]                      pmtu 9000\n 1:  198.51.100.2   0.06ms\n";
        assert_eq!(parse_tracepath(killed), None);
        assert_eq!(parse_tracepath(""), None);
    }

    const SCAMPER_OK: &str = "traceroute from 198.51.100.1 to 198.51.100.34
 1  198.51.100.2  4294967.259 ms [mtu: 9000]
 2  198.51.100.18  0.041 ms [mtu: 1500]
 3  198.51.100.34  0.047 ms [mtu: 1400]
";

    #[test]
    fn scamper_destination_hop() {
        assert_eq!(parse_scamper(SCAMPER_OK, "198.51.100.34"), Some(1400));
        let inferred = "traceroute from 198.51.100.1 to 198.51.100.34
 1  198.51.100.2  0.1 ms [mtu: 9000]
 2  198.51.100.34  0.015 ms [*mtu: 1500]
";
        assert_eq!(parse_scamper(inferred, "198.51.100.34"), Some(1500));
        let v6 = "traceroute from 2001:db8:1::1 to 2001:db8:3::2
 1  2001:db8:1::2  0.05 ms [mtu: 9000]
 2  2001:db8:2::2  0.04 ms [mtu: 1500]
 3  2001:db8:3::2  0.05 ms [mtu: 1400]
";
        assert_eq!(parse_scamper(v6, "2001:db8:3::2"), Some(1400));
    }

    #[test]
    fn scamper_without_destination_or_mtu() {
        let unreached = "traceroute from 198.51.100.1 to 198.51.100.34
 1  198.51.100.2  0.1 ms [mtu: 9000]
 2  *
 3  *
";
        assert_eq!(parse_scamper(unreached, "198.51.100.34"), None);
        let no_mtu = "traceroute from 198.51.100.1 to 198.51.100.34\n 1  198.51.100.34  0.1 ms\n";
        assert_eq!(parse_scamper(no_mtu, "198.51.100.34"), None);
        // The header mentions the target but is not a hop line.
        assert_eq!(parse_scamper("traceroute from 198.51.100.1 to 198.51.100.34 [mtu: 9000]\n", "198.51.100.34"), None);
    }
}
