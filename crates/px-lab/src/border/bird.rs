//! BIRD 2 as a lab process: one daemon per router namespace, its
//! configuration, control socket and log in the run's scratch directory,
//! driven with `birdc` on that socket only.
//!
//! The daemon runs in the foreground (`bird -f`) under `ip netns exec`,
//! which execs it: the [`LabChild`] guard holds BIRD's own PID, and
//! dropping the guard SIGKILLs and reaps exactly that process (and the
//! signal cleanup does the same on SIGINT/SIGTERM). BIRD's routes in the
//! namespace's kernel table go with the namespace.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use px_netns::netns::{LabChild, Netns};

/// Why a BIRD daemon could not be run or asked.
#[derive(Debug, thiserror::Error)]
pub enum BirdError {
    /// Writing its configuration failed.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Starting it in the namespace failed.
    #[error("cannot start bird in {ns}: {source}")]
    Spawn {
        /// The namespace.
        ns: String,
        /// What failed.
        source: px_netns::LabError,
    },
    /// It exited: BIRD refuses a configuration it cannot parse.
    #[error("bird in {ns} exited; its log:\n{log}")]
    Died {
        /// The namespace.
        ns: String,
        /// What it logged.
        log: String,
    },
    /// `birdc` failed.
    #[error("birdc {args} in {ns}: {detail}")]
    Birdc {
        /// The namespace.
        ns: String,
        /// The command.
        args: String,
        /// What went wrong.
        detail: String,
    },
    /// A state waited for did not come.
    #[error("bird in {ns}: {what} not reached within {timeout:?}; last answer:\n{last}")]
    Timeout {
        /// The namespace.
        ns: String,
        /// What was awaited.
        what: String,
        /// How long.
        timeout: Duration,
        /// The last `birdc` answer.
        last: String,
    },
}

/// A BIRD 2 daemon running in a lab namespace.
#[derive(Debug)]
pub struct Bird {
    child: Option<LabChild>,
    ns: String,
    ctl: PathBuf,
    log: PathBuf,
    conf: PathBuf,
}

/// Whether BIRD 2 (`bird` and `birdc`) is on the PATH.
pub fn installed() -> bool {
    std::process::Command::new("sh")
        .args(["-c", "command -v bird && command -v birdc"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// For tests that run BIRD: `true` if it is installed, otherwise prints a
/// skip message naming the test and returns `false`.
pub fn require_or_skip(test: &str) -> bool {
    let have = installed();
    if !have {
        eprintln!("SKIPPED {test}: BIRD 2 is not installed (Debian package bird2, scripts/lib.sh)");
    }
    have
}

impl Bird {
    /// Writes `config` to `<dir>/<name>.conf` and starts `bird -f` in `ns`
    /// with its control socket `<dir>/<name>.ctl`; returns once the socket
    /// answers (BIRD parsed the file). `config` should log to
    /// [`Bird::log_path`] (`log "<path>" all;`) for errors to be reported.
    pub fn start(ns: &Netns, dir: &Path, name: &str, config: &str) -> Result<Bird, BirdError> {
        let conf = dir.join(format!("{name}.conf"));
        let ctl = dir.join(format!("{name}.ctl"));
        let log = Self::log_path(dir, name);
        std::fs::write(&conf, config).map_err(|source| BirdError::File { path: conf.display().to_string(), source })?;
        let mut cmd = ns.command("bird");
        cmd.arg("-f").arg("-c").arg(&conf).arg("-s").arg(&ctl).stdin(Stdio::null()).stdout(Stdio::null());
        let errf = std::fs::File::create(dir.join(format!("{name}.stderr")))
            .map_err(|source| BirdError::File { path: dir.display().to_string(), source })?;
        cmd.stderr(errf);
        let child = LabChild::spawn(&mut cmd).map_err(|source| BirdError::Spawn { ns: ns.name().into(), source })?;
        let mut b = Bird { child: Some(child), ns: ns.name().to_owned(), ctl, log, conf };
        let t0 = Instant::now();
        loop {
            if b.birdc(&["show", "status"]).is_ok() {
                return Ok(b);
            }
            if b.child.as_mut().is_some_and(LabChild::has_exited) || t0.elapsed() > Duration::from_secs(10) {
                let mut log = std::fs::read_to_string(&b.log).unwrap_or_default();
                log.push_str(&std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default());
                return Err(BirdError::Died { ns: b.ns.clone(), log });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Where [`Bird::start`] expects the daemon's log for `name`.
    pub fn log_path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.log"))
    }

    /// The daemon's PID.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(LabChild::id)
    }

    /// `birdc -s CTL ARGS` in the daemon's namespace; its answer.
    pub fn birdc(&self, args: &[&str]) -> Result<String, BirdError> {
        let err = |detail: String| BirdError::Birdc { ns: self.ns.clone(), args: args.join(" "), detail };
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.ns, "birdc", "-s"])
            .arg(&self.ctl)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() || text.contains("Unable to connect") {
            return Err(err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))));
        }
        Ok(text)
    }

    /// Replaces the configuration with `config` and has BIRD reload it
    /// (`configure`): how an operator changes what is announced.
    pub fn reconfigure(&self, config: &str) -> Result<(), BirdError> {
        std::fs::write(&self.conf, config)
            .map_err(|source| BirdError::File { path: self.conf.display().to_string(), source })?;
        let out = self.birdc(&["configure"])?;
        if out.contains("Reconfigured") || out.contains("Reconfiguration in progress") {
            Ok(())
        } else {
            Err(BirdError::Birdc { ns: self.ns.clone(), args: "configure".into(), detail: out })
        }
    }

    /// Waits until every protocol in `names` is `Established` (BGP).
    pub fn wait_established(&self, names: &[&str], timeout: Duration) -> Result<(), BirdError> {
        self.wait_for(&format!("BGP sessions {names:?} established"), timeout, |b| {
            let out = b.birdc(&["show", "protocols"])?;
            let up = names
                .iter()
                .all(|n| out.lines().any(|l| l.split_whitespace().next() == Some(n) && l.contains("Established")));
            Ok((up, out))
        })
    }

    /// Polls `check` every 50 ms until it says done or `timeout` passes.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Bird) -> Result<(bool, String), BirdError>,
    ) -> Result<(), BirdError> {
        let t0 = Instant::now();
        let mut last = String::new();
        while t0.elapsed() < timeout {
            match check(self) {
                Ok((true, _)) => return Ok(()),
                Ok((false, out)) => last = out,
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(BirdError::Timeout { ns: self.ns.clone(), what: what.into(), timeout, last })
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        // SIGKILL by PID and reap (the guard); the socket file stays in the
        // scratch directory, which its owner removes.
        drop(self.child.take());
    }
}
