//! The paper's end-host experiments (HotNets '25, §2 Fig. 1, Table 1, §5.2
//! Fig. 5c), each measured against a plain Linux router in the same run and
//! printed with the paper's figure beside ours (`px lab receiver|wan|gro|
//! parallel|middlebox|report`).
//!
//! - [`receiver`]: 100 flows into one b-network receiver confined to one
//!   core, via the router (1500) and via the gateway (9000); UDP plain vs
//!   caravans (Fig. 5c).
//! - [`wan`]: one flow from the b-network over a 10 ms, 0.01 % loss path
//!   (§5.2 "sender in a b-network", Fig. 1d).
//! - [`gro`]: 1–8 concurrent flows at 1500 and 9000, GRO off/on (Fig. 1b/c).
//! - [`middlebox`]: a header-only middle box on one core vs MTU (Fig. 1a).
//! - [`parallel`]: server CPU, one 9000 connection vs six 1500 ones (Table 1).
//! - [`report`]: all of them, the demo and the PMTUD comparison in one
//!   Markdown report with the SVG plots.
//!
//! What they share lives here ([`Conditions`], [`Report`], [`Paper`]) and in
//! [`cpu`] (pinning, RPS, CPU accounting from `/proc`) and [`iperf`]
//! (iperf3 in the lab); [`http`] is `parallel`'s file server and
//! [`udp_gro`] the `receiver`'s `UDP_GRO` baseline. Plots use px-sim's SVG
//! writer ([`px_sim::svg`]). Every
//! experiment builds its namespaces through [`crate::Line`] /
//! [`crate::Topology`], so they are removed on every exit path (drop,
//! panic, SIGINT/SIGTERM via [`crate::install_signal_cleanup`]).

pub mod cpu;
pub mod gro;
pub mod http;
pub mod iperf;
pub mod middlebox;
pub mod parallel;
pub mod receiver;
pub mod report;
pub mod udp_gro;
pub mod wan;

use serde::Serialize;

use crate::netns::Netns;

/// The machine an experiment ran on, for every result.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `uname -r`.
    pub kernel: String,
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu: String,
    /// Online CPUs.
    pub cpus: usize,
    /// 1-minute load average when the experiment started (a shared machine
    /// makes every figure noisier; say how loaded it was).
    pub load_1min: f64,
}

impl Machine {
    /// Reads the machine's description.
    pub fn current() -> Machine {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned()))
            .unwrap_or_default();
        let load_1min = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0.0);
        Machine { kernel, cpu, cpus: cpu::online_cpus(), load_1min }
    }

    /// One line for a table header.
    pub fn line(&self) -> String {
        format!(
            "machine: {} ({} CPUs), kernel {}, load {:.2} at start",
            self.cpu, self.cpus, self.kernel, self.load_1min
        )
    }
}

/// The conditions of a run, stated with every result (flattened into its
/// JSON: `congestion_control`, `offloads`, `cpus`, `machine`).
#[derive(Debug, Clone, Serialize)]
pub struct Conditions {
    /// Congestion control of the hosts, as iperf3 saw it.
    pub congestion_control: String,
    /// Offloads, as text.
    pub offloads: String,
    /// Where each part ran.
    pub cpus: String,
    /// The machine.
    pub machine: Machine,
}

impl Conditions {
    /// `cc` is (sender, receiver) as iperf3 reported them, `asked` what `-C` asked for.
    pub fn new(machine: Machine, cc: &(String, String), asked: &str, offloads: &str, cpus: String) -> Conditions {
        Conditions {
            congestion_control: format!("sender {}, receiver {} (iperf3 -C {asked})", cc.0, cc.1),
            offloads: offloads.to_owned(),
            cpus,
            machine,
        }
    }

    /// The lines a table starts with (after its title).
    pub fn lines(&self) -> String {
        format!(
            "{}
congestion control: {}
offloads: {}
cpus: {}
",
            self.machine.line(),
            self.congestion_control,
            self.offloads,
            self.cpus
        )
    }

    /// The small print under a plot.
    pub fn note(&self) -> String {
        format!("{}; {}", self.machine.line(), self.congestion_control)
    }
}

/// The TCP congestion control a namespace's new sockets use.
pub fn congestion_control(ns: &Netns) -> Result<String, String> {
    ns.run(|| std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control"))
        .map_err(|e| e.to_string())?
        .map(|s| s.trim().to_owned())
        .map_err(|e| e.to_string())
}

/// `a / b`, 0 when `b` is not positive (a missing measurement is not infinity).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// What the paper reports for an experiment, printed beside our figure.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Paper {
    /// Where in the paper.
    pub figure: &'static str,
    /// What it reports, in one line.
    pub reports: &'static str,
}

/// Every experiment's result can print itself as a table and plot itself.
pub trait Report {
    /// The table the CLI prints (several lines, ends with a newline).
    fn table(&self) -> String;
    /// The SVG plot.
    fn svg(&self) -> String;
    /// JSON for `--json`.
    fn json(&self) -> serde_json::Value;
}

/// Checks that the experiments can run here: root, namespaces, two CPUs
/// or more and the tools.
pub fn check_prerequisites(what: &str, tools: &[&str]) -> Result<(), crate::RunError> {
    require(what, tools, 2, "./scripts/lib.sh lists the packages the lab needs")
}

/// Checks that a lab run can happen here: root and network namespaces, at
/// least `min_cpus` CPUs, and each of `tools` on the path (`hint`: where
/// to get them). Shared by the experiments and the demo.
pub(crate) fn require(what: &str, tools: &[&str], min_cpus: usize, hint: &'static str) -> Result<(), crate::RunError> {
    use crate::RunError;
    if let Some(why) = crate::root_unavailable_reason() {
        return Err(RunError::Unavailable { what: what.into(), need: format!("root and network namespaces: {why}") });
    }
    if cpu::online_cpus() < min_cpus {
        let need = format!("{min_cpus} CPUs (it confines the receiver to one CPU and the rest to another)");
        return Err(RunError::Unavailable { what: what.into(), need });
    }
    for tool in tools {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(RunError::MissingTool { tool: tool.to_string(), hint });
        }
    }
    Ok(())
}

/// A temporary file (a configuration for a lab process), removed on drop
/// and by the signal cleanup.
#[derive(Debug)]
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// Writes `text` to `<tmp>/<stem>-<pid>.<ext>`.
    pub fn write(stem: &str, ext: &str, text: &str) -> Result<TempFile, String> {
        let p = std::env::temp_dir().join(format!("{stem}-{}.{ext}", std::process::id()));
        crate::cleanup::register_path(&p);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempFile(p))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        crate::cleanup::unregister_path(&self.0);
    }
}
