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
pub mod sink;

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

/// Where a run's parts ran, for [`Conditions::cpus`]: the measured part
/// confined to a CPU of its own and the rest on [`cpu::REST_CPU`], or
/// nothing confined.
#[derive(Debug, Clone, Copy)]
pub enum Placement {
    /// `part` (what runs there) on `cpu`, `rest` on [`cpu::REST_CPU`];
    /// `gro_caveat`: the run has GRO on, whose merge a veth runs on the
    /// sending CPU (see [`px_netns::cpu`]).
    Confined { part: &'static str, cpu: usize, rest: &'static str, gro_caveat: bool },
    /// Nothing confined, and why.
    Free(&'static str),
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Placement::Confined { part, cpu, rest, gro_caveat } => {
                write!(f, "{part} on CPU {cpu}; {rest} on CPU {}", cpu::REST_CPU)?;
                if gro_caveat {
                    f.write_str("; with GRO on, the veth's NAPI (GRO itself) runs on the sending CPU")?;
                }
                Ok(())
            }
            Placement::Free(why) => write!(f, "not confined: {why}"),
        }
    }
}

/// The [`Conditions`] of an iperf3 experiment, gathered while it runs: the
/// machine as it was at the start, the congestion control iperf3 reported.
#[derive(Debug)]
pub struct ConditionsBuilder {
    machine: Machine,
    asked: String,
    offloads: &'static str,
    cc: (String, String),
}

impl ConditionsBuilder {
    /// At the start of a run: reads the machine; `asked` is what `-C`
    /// asks for, `offloads` the run's offloads as text.
    pub fn start(asked: &str, offloads: &'static str) -> ConditionsBuilder {
        ConditionsBuilder { machine: Machine::current(), asked: asked.to_owned(), offloads, cc: Default::default() }
    }

    /// The congestion control (sender, receiver) an iperf3 run reported.
    pub fn saw(&mut self, cc: &(String, String)) {
        self.cc = cc.clone();
    }

    /// The conditions, with where the parts ran.
    pub fn finish(self, cpus: Placement) -> Conditions {
        let (cc, asked) = (self.cc, self.asked);
        Conditions {
            congestion_control: format!("sender {}, receiver {} (iperf3 -C {asked})", cc.0, cc.1),
            offloads: self.offloads.to_owned(),
            cpus: cpus.to_string(),
            machine: self.machine,
        }
    }
}

impl Conditions {
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

/// An experiment's options as its flags' defaults make them (the options
/// derive their flags: one declaration of each default).
pub fn flag_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let matches = T::augment_args(clap::Command::new("defaults")).get_matches_from(["defaults"]);
    T::from_arg_matches(&matches).expect("every flag of an experiment has a default")
}

/// `Default` of options whose defaults are their flags' (invoked beside
/// each options struct).
macro_rules! defaults_from_flags {
    ($t:ty) => {
        impl Default for $t {
            fn default() -> $t {
                $crate::exp::flag_defaults()
            }
        }
    };
}
pub(crate) use defaults_from_flags;

/// A gateway's early-flush counters (`counters.flush`, in the order of
/// [`px_gateway::FlushReason::ALL`]) by reason name, for `--json`.
pub fn flushes_json(counts: &[u64]) -> serde_json::Value {
    let named = px_gateway::FlushReason::ALL.iter().zip(counts).map(|(f, n)| (f.name().to_string(), (*n).into()));
    serde_json::Value::Object(named.collect())
}

/// The same for a table: the reasons that occurred, in the JSON's key
/// order (`"psh_fin 12, timeout 3"`), or `"none"`.
pub fn flushes_text(counts: &[u64]) -> String {
    let json = flushes_json(counts);
    let seen: Vec<String> = json
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, n)| n.as_u64() != Some(0))
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if seen.is_empty() { "none".into() } else { seen.join(", ") }
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

#[cfg(test)]
mod flush_tests {
    use super::*;

    #[test]
    fn flushes_are_named_and_only_those_that_occurred_are_listed() {
        let mut counts = vec![0u64; px_gateway::FlushReason::ALL.len()];
        assert_eq!(flushes_text(&counts), "none");
        let (a, b) = (px_gateway::FlushReason::ALL[0], px_gateway::FlushReason::ALL[1]);
        counts[0] = 12;
        counts[1] = 3;
        let json = flushes_json(&counts);
        assert_eq!(json[a.name()], 12);
        assert_eq!(json.as_object().unwrap().len(), counts.len());
        let text = flushes_text(&counts);
        assert!(text.contains(&format!("{} 12", a.name())) && text.contains(&format!("{} 3", b.name())), "{text}");
        assert_eq!(text.matches(", ").count(), 1, "{text}");
    }
}

#[cfg(test)]
mod flag_default_tests {
    /// The options' defaults are their flags' (one declaration), and they
    /// are what the experiments ran with before.
    #[test]
    fn options_default_to_their_flags() {
        let r = crate::receiver::ReceiverOptions::new("/bin/px".into());
        assert_eq!((r.seconds, r.flows, r.udp_seconds, r.cc.as_str()), (10, 100, 5, "cubic"));
        let g = crate::gro::GroOptions::default();
        assert_eq!((g.seconds, g.flows, g.mtus), (5, vec![1, 2, 4, 8], vec![1500, 9000]));
        let m = crate::middlebox::MiddleboxOptions::default();
        assert_eq!((m.seconds, m.mtus, m.rules, m.flows), (10, vec![1500, 3000, 6000, 9000], 300, 4));
        let p = crate::parallel::ParallelOptions::default();
        assert_eq!((p.sessions, p.file_mb, p.connections), (vec![1, 4, 16], 64, 6));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_names_both_cpus_and_the_gro_caveat_once() {
        let p = Placement::Confined { part: "receiver", cpu: 1, rest: "sender", gro_caveat: true };
        assert_eq!(
            p.to_string(),
            "receiver on CPU 1; sender on CPU 0; with GRO on, the veth's NAPI (GRO itself) runs on the sending CPU"
        );
        let p = Placement::Confined { part: "middle box", cpu: 1, rest: "hosts", gro_caveat: false };
        assert_eq!(p.to_string(), "middle box on CPU 1; hosts on CPU 0");
        assert_eq!(Placement::Free("one flow").to_string(), "not confined: one flow");
        let mut b = ConditionsBuilder::start("cubic", "gro on");
        b.saw(&("cubic".into(), "reno".into()));
        let c = b.finish(Placement::Free("x"));
        assert_eq!(c.congestion_control, "sender cubic, receiver reno (iperf3 -C cubic)");
        assert_eq!(c.cpus, "not confined: x");
        assert!(c.lines().contains("cpus: not confined: x"), "{}", c.lines());
    }
}
