//! What the experiments share: the conditions every result states
//! ([`Conditions`]), the paper's figure printed beside ours ([`Paper`]),
//! the [`Report`] each result implements (table, plot, JSON), the check
//! that a run can happen here ([`check_prerequisites`]) and iperf3 in the
//! lab ([`iperf`]). Plots use px-sim's SVG writer ([`px_sim::svg`]).
//!
//! The paper's end-host experiments (HotNets '25, §2 Fig. 1, Table 1, §5.2
//! Fig. 5c) are [`crate::receiver`], [`crate::wan`], [`crate::gro`],
//! [`crate::middlebox`] and [`crate::parallel`], each measured against a
//! plain Linux router in the same run and printed with the paper's figure
//! beside ours; [`crate::report`] runs them all, the demo and the PMTUD
//! comparison into one Markdown report with the SVG plots. Every experiment
//! builds its namespaces through [`px_netns::Line`] /
//! [`px_netns::Topology`], so they are removed on every exit path (drop,
//! panic, SIGINT/SIGTERM via [`px_netns::install_signal_cleanup`]); CPU
//! pinning, RPS and CPU accounting are [`px_netns::cpu`].

pub mod iperf;

use serde::Serialize;

use px_netns::Machine;
use px_netns::cpu;
use px_netns::netns::Netns;

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

pub use px_netns::cpu::ratio;

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
    if let Some(why) = px_netns::root_unavailable_reason() {
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
