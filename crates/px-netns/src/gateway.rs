//! `px gateway` as a lab process: the real binary started in the middle
//! namespace of a [`Line`], stopped with SIGTERM by its PID, its final
//! counters read from its `--stats-file`.
//!
//! Used by `px lab demo` and by the `px gateway` root tests. The process is
//! a [`LabChild`] (killed and reaped on every exit path); its log and
//! stats files are removed when the [`GatewayProcess`] drops.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::line::Line;
use crate::netns::LabChild;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `px gateway` running in a line's middle namespace.
#[derive(Debug)]
pub struct GatewayProcess {
    child: Option<LabChild>,
    /// The gateway's PID (`ip netns exec` execs it: px's own).
    pub pid: u32,
    log: PathBuf,
    stats: PathBuf,
    started: Instant,
}

/// How the gateway ended.
#[derive(Debug)]
pub struct GatewayExit {
    /// Its exit status.
    pub status: ExitStatus,
    /// The `--stats-file` JSON (final counters, written after the flush);
    /// `Null` if there was none.
    pub stats: serde_json::Value,
    /// What it logged (stderr).
    pub log: String,
    /// From SIGTERM to exit.
    pub stop_time: Duration,
    /// CPU it used from start to SIGTERM, in cores (CPU time / wall time).
    pub cpu_cores: f64,
}

impl GatewayExit {
    /// A counter of the final stats (`counters.<name>`), 0 if absent.
    pub fn counter(&self, name: &str) -> u64 {
        self.stats["counters"][name].as_u64().unwrap_or(0)
    }

    /// The early flushes of the final stats (`counters.flush`), in the
    /// order of `px_gateway::FlushReason::ALL`; empty if absent.
    pub fn flush_counts(&self) -> Vec<u64> {
        self.stats["counters"]["flush"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_u64().unwrap_or(0)).collect())
            .unwrap_or_default()
    }
}

/// Why `px gateway` as a lab process failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Its log or stats file could not be made.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The process could not be started in the namespace.
    #[error("cannot start px gateway: {0}")]
    Spawn(String),
    /// It exited before it opened its ports.
    #[error("px gateway died: {log}")]
    Died {
        /// What it logged.
        log: String,
    },
    /// It did not open its ports within 10 s.
    #[error("px gateway did not start; its log: {log}")]
    NotStarted {
        /// What it logged.
        log: String,
    },
    /// It was stopped already.
    #[error("gateway process already gone")]
    Gone,
    /// A signal could not be sent.
    #[error("signal {sig} to px gateway: {source}")]
    Signal {
        /// The signal.
        sig: libc::c_int,
        /// The OS error.
        source: std::io::Error,
    },
    /// The awaited log line did not come.
    #[error("px gateway did not log {text:?} within {timeout:?}; its log:\n{log}")]
    LogTimeout {
        /// The text waited for.
        text: String,
        /// How long.
        timeout: Duration,
        /// What it logged.
        log: String,
    },
    /// It did not exit within 10 s of SIGTERM (then killed).
    #[error("px gateway did not exit within 10 s of SIGTERM")]
    NoExit,
    /// Waiting for its exit failed.
    #[error("waiting for px gateway: {0}")]
    Wait(String),
}

impl From<GatewayError> for String {
    /// For the lab's internal steps, which report what failed as text.
    fn from(e: GatewayError) -> String {
        e.to_string()
    }
}

impl GatewayProcess {
    /// Starts `EXE gateway --inner <right port> --outer <left port>
    /// --log-interval 0 --stats-file F ARGS` in `line`'s middle namespace
    /// and waits (up to 10 s) for its first log line (ports opened).
    pub fn start<S: AsRef<std::ffi::OsStr>>(
        line: &Line,
        exe: &Path,
        args: &[S],
    ) -> Result<GatewayProcess, GatewayError> {
        Self::start_wrapped(line, &[], exe, args)
    }

    /// As [`GatewayProcess::start`], with `EXE` run by `wrapper` (e.g.
    /// `setpriv --reuid=nobody … --`: the gateway as an unprivileged user
    /// with chosen capabilities). The wrapper must exec `EXE`, so that the
    /// PID stays the gateway's.
    pub fn start_wrapped<S: AsRef<std::ffi::OsStr>>(
        line: &Line,
        wrapper: &[&str],
        exe: &Path,
        args: &[S],
    ) -> Result<GatewayProcess, GatewayError> {
        let [_, outer, inner, _] = line.spec.devs;
        Self::start_in(line.middle_ns(), inner, outer, wrapper, exe, args)
    }

    /// As [`GatewayProcess::start_wrapped`], in any namespace `ns` between
    /// its ports `inner` and `outer` (a topology other than a [`Line`]:
    /// the gateways of `px lab border`).
    pub fn start_in<S: AsRef<std::ffi::OsStr>>(
        ns: &crate::Netns,
        inner: &str,
        outer: &str,
        wrapper: &[&str],
        exe: &Path,
        args: &[S],
    ) -> Result<GatewayProcess, GatewayError> {
        // Control sockets and port locks earlier gateways left for
        // namespaces that are gone (a `kill -9`, an interrupted run).
        crate::runfiles::sweep(Path::new(crate::runfiles::RUN_DIR));
        let tag = format!("{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir();
        let log = dir.join(format!("px-lab-gw-{tag}.log"));
        let stats = dir.join(format!("px-lab-gw-{tag}.json"));
        // Removed by the signal cleanup too (SIGINT/SIGTERM mid-run).
        crate::cleanup::register_path(&log);
        crate::cleanup::register_path(&stats);
        let logf = std::fs::File::create(&log)
            .map_err(|source| GatewayError::File { path: log.display().to_string(), source })?;
        let mut cmd = match wrapper.split_first() {
            Some((program, wargs)) => {
                let mut c = ns.command(program);
                c.args(wargs).arg(exe);
                c
            }
            None => ns.command(&exe.to_string_lossy()),
        };
        cmd.args(["gateway", "--inner", inner, "--outer", outer, "--log-interval", "0", "--stats-file"])
            .arg(&stats)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf);
        let child = LabChild::spawn(&mut cmd).map_err(|e| GatewayError::Spawn(e.to_string()))?;
        let pid = child.id().ok_or_else(|| GatewayError::Spawn("no pid".into()))?;
        let g = GatewayProcess { child: Some(child), pid, log, stats, started: Instant::now() };
        while g.started.elapsed() < Duration::from_secs(10) {
            let text = std::fs::read_to_string(&g.log).unwrap_or_default();
            if text.contains("px gateway: inner") {
                return Ok(g);
            }
            if !running(pid) {
                return Err(GatewayError::Died { log: text });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(GatewayError::NotStarted { log: std::fs::read_to_string(&g.log).unwrap_or_default() })
    }

    /// Sends `sig` to the running gateway (e.g. `libc::SIGHUP`: reload).
    pub fn signal(&self, sig: libc::c_int) -> Result<(), GatewayError> {
        if self.child.is_none() {
            return Err(GatewayError::Gone);
        }
        // SAFETY: kill(2) on the PID of the child this process started and
        // has not reaped yet (its LabChild guard is still alive).
        if unsafe { libc::kill(self.pid as i32, sig) } != 0 {
            return Err(GatewayError::Signal { sig, source: std::io::Error::last_os_error() });
        }
        Ok(())
    }

    /// SIGKILL (a crash: no flush, no stats file) and reap it; returns
    /// when the process is gone.
    pub fn kill(mut self) -> Result<(), GatewayError> {
        let mut child = self.child.take().ok_or(GatewayError::Gone)?;
        child.kill_and_reap();
        Ok(())
    }

    /// SIGHUP: the gateway reads its configuration again.
    pub fn reload(&self) -> Result<(), GatewayError> {
        self.signal(libc::SIGHUP)
    }

    /// What the gateway has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (up to `timeout`) until the log contains `text`; returns the log.
    pub fn wait_log(&self, text: &str, timeout: Duration) -> Result<String, GatewayError> {
        let t0 = Instant::now();
        loop {
            let log = self.log();
            if log.contains(text) {
                return Ok(log);
            }
            if t0.elapsed() > timeout {
                return Err(GatewayError::LogTimeout { text: text.to_string(), timeout, log });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then wait (at most 10 s, then SIGKILL and an error) for the
    /// exit, and read the stats.
    pub fn stop(mut self) -> Result<GatewayExit, GatewayError> {
        let child = self.child.take().ok_or(GatewayError::Gone)?;
        let cpu = crate::cpu::process_cpu_seconds(self.pid).unwrap_or(0.0);
        let cpu_cores = cpu / self.started.elapsed().as_secs_f64().max(1e-9);
        let t0 = Instant::now();
        // SAFETY: kill(2) on the PID of the child this process started and
        // has not reaped yet (its LabChild guard is still alive).
        if unsafe { libc::kill(self.pid as i32, libc::SIGTERM) } != 0 {
            return Err(GatewayError::Signal { sig: libc::SIGTERM, source: std::io::Error::last_os_error() });
        }
        let waiter = std::thread::spawn(move || {
            let out = child.wait_with_output();
            (out, t0.elapsed())
        });
        while !waiter.is_finished() {
            if t0.elapsed() > Duration::from_secs(10) {
                // SAFETY: as above; the waiter reaps it.
                unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
                let _ = waiter.join();
                return Err(GatewayError::NoExit);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (out, stop_time) = waiter.join().map_err(|_| GatewayError::Wait("the waiting thread panicked".into()))?;
        let status = out.map_err(|e| GatewayError::Wait(e.to_string()))?.status;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let stats = std::fs::read_to_string(&self.stats)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(serde_json::Value::Null);
        Ok(GatewayExit { status, stats, log, stop_time, cpu_cores })
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        // Not stopped (an error on the way): the LabChild SIGKILLs and reaps it.
        drop(self.child.take());
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.stats);
        crate::cleanup::unregister_path(&self.log);
        crate::cleanup::unregister_path(&self.stats);
    }
}

/// Whether a process exists and has not exited: our unreaped child that
/// died (it refused to start) is a zombie, which still has a /proc entry.
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
}
