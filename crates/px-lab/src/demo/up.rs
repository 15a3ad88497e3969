//! `px lab up` and `px lab down`: the demo's topology left running for
//! hands-on use (IPv4 and IPv6 on one subnet, an F-PMTUD responder on both
//! hosts, the gateway started from a configuration file the packaged
//! service would read), and removed again from what `up` recorded in
//! [`state_file`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use px_netns::line::{Addressing, Line, LineSpec};

use super::lab_err;

/// Where `px lab up` records what `px lab down` removes.
pub fn state_file() -> PathBuf {
    std::env::temp_dir().join("px-lab-up.json")
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
pub fn up(exe: &Path, no_gateway: bool) -> Result<UpReport, crate::RunError> {
    crate::exp::require("px lab up", &[], 1, "")?;
    if state_file().exists() {
        return Err(format!("a lab is already up ({}); run `px lab down` first", state_file().display()).into());
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
    std::fs::write(state_file(), state.to_string()).map_err(|e| format!("{}: {e}", state_file().display()))?;
    // What started is recorded: `px lab down` removes it even after a failure.
    result?;
    Ok(UpReport { description, namespaces: names, gateway_ns: gw_ns, config, gateway_command, gateway, responders })
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

/// `px lab down`: stops the gateway `px lab up` started and removes its
/// namespaces; returns their names.
pub fn down() -> Result<Vec<String>, crate::RunError> {
    let path = state_file();
    let text = std::fs::read_to_string(&path).map_err(|_| format!("no lab is up ({} not found)", path.display()))?;
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
