//! The machine a lab run happened on, stated with every result.

use serde::Serialize;

use crate::cpu;

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
