//! Running the external tools the lab is built from (`ip`, `ethtool`,
//! `sysctl`, traffic generators).
//!
//! Guarantees: a command either succeeds (exit status 0) and its stdout is
//! returned, or a [`CmdError`] names the full command line, its status and
//! its stderr, so a failing lab step says exactly what went wrong.

use std::process::Command;

/// Why an external command failed.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    /// The program could not be started (not installed, not executable).
    #[error("cannot start `{cmd}`: {source}")]
    Spawn {
        /// The command line as it would be typed.
        cmd: String,
        /// The error from `fork`/`exec`.
        source: std::io::Error,
    },
    /// The program ran and exited with a non-zero status or a signal.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        /// The command line as it would be typed.
        cmd: String,
        /// The exit status.
        status: std::process::ExitStatus,
        /// The program's stderr, trimmed.
        stderr: String,
    },
}

/// The command line of `cmd` as a shell user would type it, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion; returns its stdout when it exits with status 0.
pub fn run(cmd: &mut Command) -> Result<String, CmdError> {
    let out = cmd.output().map_err(|source| CmdError::Spawn { cmd: describe(cmd), source })?;
    if !out.status.success() {
        return Err(CmdError::Failed {
            cmd: describe(cmd),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a program with arguments; shorthand for [`run`].
pub fn run_args(program: &str, args: &[&str]) -> Result<String, CmdError> {
    run(Command::new(program).args(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_joins_program_and_args() {
        let mut c = Command::new("ip");
        c.args(["-n", "px-a-1-0", "link", "show"]);
        assert_eq!(describe(&c), "ip -n px-a-1-0 link show");
    }

    #[test]
    fn failure_carries_status_and_stderr() {
        let err = run_args("sh", &["-c", "echo boom >&2; exit 3"]).unwrap_err();
        match err {
            CmdError::Failed { status, stderr, cmd } => {
                assert_eq!(status.code(), Some(3));
                assert_eq!(stderr, "boom");
                assert!(cmd.starts_with("sh -c"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn success_returns_stdout() {
        assert_eq!(run_args("sh", &["-c", "printf hi"]).unwrap(), "hi");
    }

    #[test]
    fn missing_program_is_spawn_error() {
        let err = run_args("px-no-such-program-here", &[]).unwrap_err();
        assert!(matches!(err, CmdError::Spawn { .. }));
    }
}
