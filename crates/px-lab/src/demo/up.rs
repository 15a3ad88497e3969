//! `px lab up` and `px lab down`: the demo's topology left running for
//! hands-on use (IPv4 and IPv6 on one subnet, an F-PMTUD responder on both
//! hosts, the gateway started from a configuration file the packaged
//! service would read), and removed again from what `up` recorded in
//! [`state_file`].
//!
//! Several labs can be up on one machine: each has a name (`--name`, by
//! default the user who runs `px`: sudo's `SUDO_USER`, else `USER`) and its
//! own state file, and `px lab down` removes only the lab of its name, so
//! a second user's `px lab down` leaves the first user's lab alone. The
//! namespaces carry the `px` process's PID, so two labs never share one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use px_netns::line::{Addressing, Line, LineSpec};

use super::lab_err;

/// Where `px lab up` records what `px lab down` removes, for the lab
/// `name`.
pub fn state_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{STATE_PREFIX}{name}.json"))
}

/// The state files' names: this, the lab's name, `.json`.
const STATE_PREFIX: &str = "px-lab-up-";

/// The default lab name: the user who runs `px` (`sudo` keeps the real one
/// in `SUDO_USER`), else the user ID; made a valid name.
pub fn default_name() -> String {
    let var = |k| std::env::var(k).ok().filter(|v: &String| !v.is_empty());
    // SAFETY: getuid(2) has no arguments and cannot fail.
    owner_name(var("SUDO_USER").as_deref(), var("USER").as_deref(), unsafe { libc::getuid() })
}

/// [`default_name`] from its inputs.
fn owner_name(sudo_user: Option<&str>, user: Option<&str>, uid: u32) -> String {
    let raw = sudo_user.or(user).map_or_else(|| format!("uid{uid}"), str::to_string);
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(32).collect();
    if clean.is_empty() { format!("uid{uid}") } else { clean }
}

/// Checks a lab name: 1–32 letters, digits, `_` or `-` (it names a file).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok { Ok(()) } else { Err(format!("lab name {name:?}: use 1–32 letters, digits, `_` or `-`")) }
}

/// The names of the labs that are up (their state files), sorted.
pub fn labs_up() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            Some(n.strip_prefix(STATE_PREFIX)?.strip_suffix(".json")?.to_string())
        })
        .filter(|n| check_name(n).is_ok())
        .collect();
    names.sort();
    names
}

/// The metrics endpoint of the gateway `px lab up` starts (on the gateway
/// namespace's own loopback).
pub const UP_METRICS: &str = "127.0.0.1:9464";

/// What `px lab up` left running (`px lab up --json` prints it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct UpReport {
    /// [`px_netns::Topology::describe`] of the lab.
    pub description: String,
    /// The namespaces, legacy, gw, bnet.
    pub namespaces: Vec<String>,
    /// The gateway namespace.
    pub gateway_ns: String,
    /// The gateway's configuration file (what the packaged service reads
    /// from /etc/px/NAME.toml): ports, metrics, ICMP sources.
    pub config: PathBuf,
    /// The command that starts the gateway by hand (what `px lab up` runs
    /// unless `--no-gateway`).
    pub gateway_command: Vec<String>,
    /// `px gateway`'s PID and log, if started.
    pub gateway: Option<(u32, PathBuf)>,
    /// F-PMTUD responders (`px fpmtud`): namespace and PID, on both hosts.
    pub responders: Vec<(String, u32)>,
    /// The lab's name (`px lab down --name` takes it).
    pub name: String,
    /// The name was the default one (`px lab down` alone takes it down).
    pub default_name: bool,
}

/// The gateway configuration of `px lab up`: the packaged service's file
/// for the lab's ports, with a metrics endpoint and ICMP sources in the
/// documentation ranges (the routers' addresses of the lab's subnet).
fn up_config(outer: &str, inner: &str) -> String {
    format!(
        "# px lab up: the gateway between the lab's legacy host and b-network host.\n\
         # Edit, then reload: kill -HUP <pid> (what `systemctl reload` does).\n\
         inner = \"{inner}\"\nouter = \"{outer}\"\nmetrics = \"{UP_METRICS}\"\nlog_interval_s = 10\n\n\
         [engine]\nicmp_source_v4 = \"{}\"\nicmp_source_v6 = \"{}\"\n",
        px_netns::line::ROUTER_LEFT_V4,
        px_netns::line::ROUTER_LEFT_V6
    )
}

/// Starts `exe args` in namespace `ns` with `ip netns exec`, detached from
/// this process (it outlives it; `px lab down` stops it by PID), its
/// stderr to `log`.
fn spawn_in(ns: &str, exe: &Path, args: &[&str], log: &Path) -> Result<u32, String> {
    let logf = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .map_err(|e| format!("cannot start {} {}: {e}", exe.display(), args.join(" ")))?;
    Ok(child.id())
}

/// `px lab up`: the demo topology with IPv4 and IPv6 on one subnet, kept
/// after this process exits; an F-PMTUD responder on both hosts; the
/// gateway's configuration file written, and `px gateway` started with it
/// unless `no_gateway` (then the report holds the command to start it).
/// `name` is the lab's (see [`check_name`]; none: [`default_name`]).
pub fn up(exe: &Path, no_gateway: bool, name: Option<&str>) -> Result<UpReport, crate::RunError> {
    let default = default_name();
    let name = name.unwrap_or(&default);
    check_name(name)?;
    crate::exp::require("px lab up", &[], 1, "")?;
    let state_path = state_file(name);
    if state_path.exists() {
        return Err(format!(
            "a lab named {name} is already up ({}): take it down with `px lab down --name {name}`, or start another with `px lab up --name OTHER`",
            state_path.display()
        )
        .into());
    }
    px_netns::install_signal_cleanup().map_err(px_netns::LabError::Signal)?;
    let lab = Line::build(LineSpec { ipv6: true, ..LineSpec::gateway_lab() })?;
    lab.address(Addressing::Bump).map_err(lab_err)?;
    let [_, outer, inner, _] = lab.spec.devs;
    let gw_ns = lab.middle_ns().name().to_string();
    let ends = [lab.left_ns().name().to_string(), lab.right_ns().name().to_string()];
    let description = lab.topo.describe().map_err(lab_err)?;
    let tmp = std::env::temp_dir();
    let config = tmp.join(format!("px-lab-up-{gw_ns}.toml"));
    std::fs::write(&config, up_config(outer, inner)).map_err(|e| format!("{}: {e}", config.display()))?;
    let gateway_command: Vec<String> = ["ip", "netns", "exec", &gw_ns]
        .iter()
        .map(|s| s.to_string())
        .chain([exe.display().to_string(), "gateway".into(), "--config".into(), config.display().to_string()])
        .collect();
    let mut gateway = None;
    let log = tmp.join(format!("px-lab-up-gateway-{gw_ns}.log"));
    let mut responders = Vec::new();
    let mut started = || -> Result<(), String> {
        if !no_gateway {
            let pid = spawn_in(&gw_ns, exe, &["gateway", "--config", &config.display().to_string()], &log)?;
            gateway = Some((pid, log.clone()));
        }
        for ns in &ends {
            let rlog = tmp.join(format!("px-lab-up-fpmtud-{ns}.log"));
            responders.push((ns.clone(), spawn_in(ns, exe, &["fpmtud"], &rlog)?));
        }
        Ok(())
    };
    let result = started();
    let Line { topo, .. } = lab;
    let names = topo.persist();
    let state = serde_json::json!({
        "namespaces": names,
        "gateway_pid": gateway.as_ref().map(|g| g.0),
        "gateway_log": log,
        "config": config,
        "responder_pids": responders.iter().map(|r| r.1).collect::<Vec<_>>(),
    });
    std::fs::write(&state_path, state.to_string()).map_err(|e| format!("{}: {e}", state_path.display()))?;
    // What started is recorded: `px lab down` removes it even after a failure.
    result?;
    Ok(UpReport {
        description,
        namespaces: names,
        gateway_ns: gw_ns,
        config,
        gateway_command,
        gateway,
        responders,
        default_name: name == default,
        name: name.to_string(),
    })
}

/// Sends SIGTERM to `pid` if it is still a `px` process running `what`,
/// and waits (up to 2 s) for it to go.
fn stop_pid(pid: u64, what: &str) {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).split('\0').any(|a| a == what) {
        return;
    }
    // SAFETY: kill(2) on a PID `px lab up` recorded, checked above to be ours.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `px lab down`: stops the gateway `px lab up` started for the lab
/// `name` and removes its namespaces; returns their names. Other labs stay.
pub fn down(name: &str) -> Result<Vec<String>, crate::RunError> {
    check_name(name)?;
    let path = state_file(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|_| format!("no lab named {name} is up ({} not found)", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(pid) = v["gateway_pid"].as_u64() {
        stop_pid(pid, "gateway");
    }
    for pid in v["responder_pids"].as_array().into_iter().flatten().filter_map(|p| p.as_u64()) {
        stop_pid(pid, "fpmtud");
    }
    let mut removed = Vec::new();
    for n in v["namespaces"].as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
        if n.starts_with("px-") {
            px_netns::runfiles::remove_files_of_namespace(n);
            let _ = Command::new("ip").args(["netns", "del", n]).status();
            removed.push(n.to_owned());
        }
    }
    if let Some(log) = v["gateway_log"].as_str().filter(|l| l.contains("px-lab-up-gateway-")) {
        let _ = std::fs::remove_file(log);
    }
    if let Some(c) = v["config"].as_str().filter(|l| l.contains("px-lab-up-")) {
        let _ = std::fs::remove_file(c);
    }
    for n in &removed {
        let _ = std::fs::remove_file(std::env::temp_dir().join(format!("px-lab-up-fpmtud-{n}.log")));
    }
    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 38 item 6: two users' labs are two labs (the name follows the
    /// user who runs px, sudo's first), and a name is safe in a file name.
    #[test]
    fn each_user_gets_a_lab_name_of_their_own() {
        assert_eq!(owner_name(Some("alice"), Some("root"), 0), "alice");
        assert_eq!(owner_name(None, Some("bob"), 1000), "bob");
        assert_eq!(owner_name(None, None, 1000), "uid1000");
        assert_eq!(owner_name(Some("a.b/../c"), None, 0), "a_b____c");
        assert_ne!(state_file("alice"), state_file("bob"));
        for ok in ["alice", "lab-2", "x_y", &"a".repeat(32)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "../x", "a b", &"a".repeat(33)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
