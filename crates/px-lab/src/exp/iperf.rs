//! iperf3 in the lab: a server in one namespace, a client in another,
//! either pinned to a CPU, with the CPU time each process used. The one
//! place that runs iperf3 and reads its output: the experiments and the
//! demo call [`Iperf::run`] or [`Iperf::run_with`].
//!
//! The server runs until the client is done (not `-1`), so its
//! `/proc/PID/stat` can be read after the transfer; both are lab children,
//! killed and reaped on every exit path.

use std::process::Stdio;
use std::time::Duration;

use px_netns::netns::{LabChild, Netns};

use px_netns::cpu::process_cpu_seconds;

/// One iperf3 run.
#[derive(Debug, Clone)]
pub struct Iperf<'a> {
    /// Where the server runs.
    pub server: &'a Netns,
    /// Where the client (the sender) runs.
    pub client: &'a Netns,
    /// The server's address.
    pub addr: &'a str,
    /// Its port.
    pub port: u16,
    /// Seconds of traffic.
    pub seconds: u64,
    /// Parallel flows (`-P`).
    pub flows: u64,
    /// Pin the server here.
    pub server_cpu: Option<usize>,
    /// Pin the client here.
    pub client_cpu: Option<usize>,
    /// Sender MSS (`-M`), if set.
    pub mss: Option<u32>,
    /// Congestion control (`-C`, set on the sockets with TCP_CONGESTION:
    /// a namespace may not change its default to one outside
    /// `tcp_allowed_congestion_control`, a privileged socket may).
    pub cc: Option<&'a str>,
}

/// What one iperf3 run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IperfRun {
    /// Received throughput, all flows (Gbit/s).
    pub gbps: f64,
    /// Sender retransmits.
    pub retransmits: u64,
    /// Payload bytes the client sent, all flows (`end.sum_sent.bytes`).
    pub bytes: u64,
    /// The sender's MSS as iperf3 reports it.
    pub sender_mss: Option<u32>,
    /// CPU seconds of the server process (the receiver) during the run
    /// (`/proc/PID/stat`).
    pub server_cpu_s: f64,
    /// CPU seconds of the client process (the sender), from iperf3's own
    /// `cpu_utilization_percent.host_total` (its getrusage) × the duration.
    pub client_cpu_s: f64,
    /// Congestion control of the sender and of the receiver, as iperf3 reports them.
    pub congestion: (String, String),
}

fn command(ns: &Netns, cpu: Option<usize>) -> std::process::Command {
    match cpu {
        Some(c) => {
            let mut t = ns.command("taskset");
            t.args(["-c", &c.to_string(), "iperf3"]);
            t
        }
        None => ns.command("iperf3"),
    }
}

impl Iperf<'_> {
    /// Runs it; `Err` with iperf3's stderr if it gave no result.
    pub fn run(&self) -> Result<IperfRun, String> {
        self.run_with(|| Ok(()), || ()).map(|(run, (), ())| run)
    }

    /// Runs it as [`Iperf::run`] does, and calls `ready` once the server
    /// listens (before the client starts: frame observers) and `midway`
    /// halfway through the client's run (a look at the live connections);
    /// returns what they gave beside the result.
    pub fn run_with<R, M>(
        &self,
        ready: impl FnOnce() -> Result<R, String>,
        midway: impl FnOnce() -> M,
    ) -> Result<(IperfRun, R, M), String> {
        let p = self.port.to_string();
        let mut server = command(self.server, self.server_cpu);
        server.args(["-s", "-p", &p]).stdout(Stdio::null()).stderr(Stdio::null());
        let server = LabChild::spawn(&mut server).map_err(|e| e.to_string())?;
        let spid = server.id().unwrap_or(0);
        std::thread::sleep(Duration::from_millis(300));
        let ready = ready()?;
        let cpu0 = process_cpu_seconds(spid).unwrap_or(0.0);
        let mut client = command(self.client, self.client_cpu);
        client.args(["-c", self.addr, "-p", &p, "-J", "-t", &self.seconds.to_string(), "-P", &self.flows.to_string()]);
        if let Some(m) = self.mss {
            client.args(["-M", &m.to_string()]);
        }
        if let Some(cc) = self.cc {
            client.args(["-C", cc]);
        }
        client.stdout(Stdio::piped()).stderr(Stdio::piped());
        let client = LabChild::spawn(&mut client).map_err(|e| e.to_string())?;
        // iperf3 -J prints once at the end: the pipe cannot fill meanwhile.
        std::thread::sleep(Duration::from_millis(self.seconds * 500));
        let midway = midway();
        let out = client.wait_with_output().map_err(|e| e.to_string())?;
        let server_cpu_s = process_cpu_seconds(spid).unwrap_or(cpu0) - cpu0;
        drop(server);
        let text = String::from_utf8_lossy(&out.stdout);
        let (gbps, retransmits, sender_mss) = parse_iperf3(&text).ok_or_else(|| {
            let err: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            format!(
                "iperf3 to {}:{} gave no result: {} {}",
                self.addr,
                self.port,
                err["error"].as_str().unwrap_or(""),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let cc = |k: &str| v["end"][k].as_str().unwrap_or("?").to_owned();
        let congestion = (cc("sender_tcp_congestion"), cc("receiver_tcp_congestion"));
        let host_pct = v["end"]["cpu_utilization_percent"]["host_total"].as_f64().unwrap_or(0.0);
        let duration = v["end"]["sum_sent"]["seconds"].as_f64().unwrap_or(self.seconds as f64);
        let client_cpu_s = host_pct / 100.0 * duration;
        let bytes = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
        Ok((IperfRun { gbps, retransmits, bytes, sender_mss, server_cpu_s, client_cpu_s, congestion }, ready, midway))
    }
}

/// Received throughput (Gbps), sender retransmits and the sender's MSS from
/// `iperf3 -J` output.
fn parse_iperf3(json: &str) -> Option<(f64, u64, Option<u32>)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64()?;
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    let mss = v["start"]["tcp_mss_default"].as_u64().map(|m| m as u32);
    Some((bps / 1e9, retr, mss))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_json() {
        let j = r#"{"start":{"tcp_mss_default":1448},"end":{"sum_sent":{"retransmits":3},"sum_received":{"bits_per_second":7.5e9}}}"#;
        assert_eq!(parse_iperf3(j), Some((7.5, 3, Some(1448))));
        assert_eq!(parse_iperf3("{}"), None);
    }
}
