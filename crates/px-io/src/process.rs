//! Naming a process so that a later process with the same PID is not
//! taken for it: its PID and its start time (clock ticks after boot, field
//! 22 of `/proc/PID/stat`). What the gateway's port lock and `px survey`'s
//! nftables table record of their owner, so that a file or table left by
//! a killed one is recognised as stale even once its PID is reused.

use std::io;

/// The start time of process `pid`, or `None` if it does not exist (or
/// `/proc` does not show it).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start(&stat)
}

/// Field 22 of a `/proc/PID/stat` line. The command name (field 2) may hold
/// spaces and parentheses: fields are counted from the last ')'.
fn parse_start(stat: &str) -> Option<u64> {
    stat.get(stat.rfind(')')? + 1..)?.split_whitespace().nth(19)?.parse().ok()
}

/// This process's start time.
pub fn own_start_time() -> Option<u64> {
    start_time(std::process::id())
}

/// Whether the process `pid` that started at `start` still runs: the PID
/// exists and, when `start` is known, started then (not a later process
/// that got the PID).
pub fn is_running(pid: u32, start: Option<u64>) -> bool {
    match (start_time(pid), start) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => {
            // No /proc entry: ask the kernel whether the PID exists.
            // SAFETY: signal 0 only checks; no signal is sent.
            let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
            r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_whatever_the_command_name() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(parse_start(line), Some(987_654));
        assert_eq!(parse_start("4242 (x"), None);
        assert_eq!(parse_start(""), None);
    }

    #[test]
    fn this_process_runs_and_a_later_one_with_its_pid_would_not_be_it() {
        let me = std::process::id();
        let start = own_start_time().expect("/proc shows this process");
        assert!(is_running(me, Some(start)));
        assert!(is_running(me, None));
        assert!(!is_running(me, Some(start + 1)), "another start time is another process");
        // PIDs above the kernel's maximum (4194304) never exist.
        assert!(!is_running(4_194_305, None));
    }
}
