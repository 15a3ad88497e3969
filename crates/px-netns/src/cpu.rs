//! Confining an experiment's parts to CPUs, and accounting what each CPU
//! spent, from `/proc`.
//!
//! The receiver experiments put the measured host's receive work on one
//! CPU (the last) and everything else on another (CPU 0):
//! - the host's interface steers its receive queue there with RPS
//!   (`/sys/class/net/IF/queues/rx-0/rps_cpus`, written inside the
//!   namespace, whose `/sys` `ip netns exec` mounts), so the protocol
//!   processing (IP, TCP, socket wake-up) runs in that CPU's softirq;
//! - the host's application is started under `taskset -c CPU`;
//! - every other interface steers to CPU 0, and the other processes are
//!   pinned there.
//!
//! Caveat stated in every result: with GRO on, a veth runs NAPI (and so the
//! GRO merge itself) on the CPU that *sent* the frame; only what follows
//! GRO is steered. The "receiver core" then does less than a NIC's RX
//! core would do.
//!
//! Accounting: [`CpuTimes`] reads `/proc/stat` per CPU (busy = all but idle
//! and iowait; softirq and irq separately); [`process_cpu_seconds`] reads
//! `/proc/PID/stat` (user + system of all threads, exited ones included).
//! A confined host's CPU is [`CpuUse::host_seconds`]: its own processes'
//! time plus the softirq and irq time of its CPU — robust to other
//! programs' *processes* on that CPU (a shared machine), though not to
//! other softirq work landing there.

use std::time::Instant;

use crate::netns::Netns;

/// `a / b`, 0 when `b` is not positive (a missing measurement is not infinity).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// CPUs online (`sysconf(_SC_NPROCESSORS_ONLN)`).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// The CPU the measured receiver gets (the last one).
pub fn rx_cpu() -> usize {
    online_cpus() - 1
}

/// The CPU everything else gets.
pub const REST_CPU: usize = 0;

/// Steers receive processing of `dev`'s (only) receive queue in `ns` to `cpu`
/// with RPS.
pub fn steer_rx(ns: &Netns, dev: &str, cpu: usize) -> Result<(), String> {
    crate::netns::check_ifname(dev).map_err(|e| e.to_string())?;
    let mask = format!("{:x}", 1u64 << cpu);
    let path = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
    ns.exec("sh", &["-c", &format!("echo {mask} > {path}")]).map(drop).map_err(|e| format!("RPS on {dev}: {e}"))
}

/// Confines a [`crate::Line`]'s right host's receive processing to
/// [`rx_cpu`] and steers every other interface of the line to
/// [`REST_CPU`]; returns the right host's CPU.
pub fn confine_right_host(line: &crate::Line) -> Result<usize, String> {
    let [l_dev, ml_dev, mr_dev, r_dev] = line.spec.devs;
    let rx = rx_cpu();
    steer_rx(line.right_ns(), r_dev, rx)?;
    steer_rx(line.left_ns(), l_dev, REST_CPU)?;
    for d in [ml_dev, mr_dev] {
        steer_rx(line.middle_ns(), d, REST_CPU)?;
    }
    Ok(rx)
}

/// CPU seconds (user + system) the calling thread has used.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data that getrusage fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// Pins every thread of process `pid` (ours) to `cpu`.
pub fn pin_process(pid: u32, cpu: usize) -> Result<(), String> {
    crate::cmd::run_args("taskset", &["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .map(drop)
        .map_err(|e| format!("taskset: {e}"))
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(format!("cpu {cpu} out of range"));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!("sched_setaffinity: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// CPU seconds (user + system, all its threads, exited ones included) a
/// process has used so far.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

/// How many times the live threads of process `pid` whose names start
/// with `name` have gone to sleep (`voluntary_ctxt_switches` of each
/// `/proc/PID/task/*/status`): a worker that waits in `poll` adds one per
/// wake-up, one that spins adds none, whatever else the machine runs (a
/// preemption is involuntary).
pub fn thread_sleeps(pid: u32, name: &str) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sleeps = 0;
    for t in tasks.flatten() {
        // A thread that ended since the listing no longer counts.
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else { continue };
        let comm = status.lines().find_map(|l| l.strip_prefix("Name:")).unwrap_or("").trim();
        if comm.starts_with(name) {
            sleeps += parse_voluntary_switches(&status)?;
        }
    }
    Some(sleeps)
}

/// `voluntary_ctxt_switches` of a `/proc/.../status` text.
pub fn parse_voluntary_switches(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
}

/// How many times `cpu` ran the network receive softirq (`NET_RX` of
/// `/proc/softirqs`): each run takes a batch of packets, so packets per
/// run say how well a receiver's per-batch work (the interrupt, the
/// softirq's entry, the wake-up) is spread.
pub fn net_rx_softirqs(cpu: usize) -> Option<u64> {
    parse_softirq(&std::fs::read_to_string("/proc/softirqs").ok()?, "NET_RX", cpu)
}

/// One count of a `/proc/softirqs` text: the row `name`, the column `cpu`.
pub fn parse_softirq(text: &str, name: &str, cpu: usize) -> Option<u64> {
    let row = text.lines().find(|l| l.trim_start().starts_with(&format!("{name}:")))?;
    row.split_whitespace().nth(cpu + 1)?.parse().ok()
}

/// One reading of `/proc/stat`'s per-CPU lines.
#[derive(Debug, Clone)]
pub struct CpuTimes {
    at: Instant,
    /// Per CPU: (busy, softirq + irq) in seconds since boot.
    cpus: Vec<(f64, f64)>,
}

/// What one CPU did between two [`CpuTimes`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUse {
    /// Seconds it was busy (anything but idle and iowait).
    pub busy_s: f64,
    /// Of which in softirq and hard irq.
    pub softirq_s: f64,
    /// Wall-clock seconds between the readings.
    pub wall_s: f64,
}

impl CpuUse {
    /// CPU seconds of a host confined to this CPU whose processes used
    /// `process_s`: those plus this CPU's softirq and irq time.
    pub fn host_seconds(&self, process_s: f64) -> f64 {
        process_s + self.softirq_s
    }

    /// Busy fraction, 0..=1.
    pub fn busy(&self) -> f64 {
        ratio(self.busy_s, self.wall_s).min(1.0)
    }
}

impl CpuTimes {
    /// Reads `/proc/stat` now.
    pub fn now() -> CpuTimes {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        CpuTimes { at: Instant::now(), cpus: parse_proc_stat(&text) }
    }

    /// What all CPUs together did since `self` (busy and softirq seconds
    /// summed over the CPUs).
    pub fn since_all(&self) -> CpuUse {
        let now = CpuTimes::now();
        let sum = |v: &CpuTimes| v.cpus.iter().fold((0.0, 0.0), |(b, s), (b1, s1)| (b + b1, s + s1));
        let ((b0, s0), (b1, s1)) = (sum(self), sum(&now));
        CpuUse {
            busy_s: (b1 - b0).max(0.0),
            softirq_s: (s1 - s0).max(0.0),
            wall_s: now.at.duration_since(self.at).as_secs_f64(),
        }
    }

    /// What CPU `cpu` did since `self`.
    pub fn since(&self, cpu: usize) -> CpuUse {
        let now = CpuTimes::now();
        let d = |v: &CpuTimes| v.cpus.get(cpu).copied().unwrap_or_default();
        let (b0, s0) = d(self);
        let (b1, s1) = d(&now);
        CpuUse {
            busy_s: (b1 - b0).max(0.0),
            softirq_s: (s1 - s0).max(0.0),
            wall_s: now.at.duration_since(self.at).as_secs_f64(),
        }
    }
}

/// `(busy, softirq + irq)` seconds per CPU from `/proc/stat` text.
fn parse_proc_stat(text: &str) -> Vec<(f64, f64)> {
    // SAFETY: sysconf has no preconditions.
    let hz = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0);
    let mut out = Vec::new();
    for l in text.lines() {
        let mut w = l.split_whitespace();
        let Some(name) = w.next() else { continue };
        let Some(idx) = name.strip_prefix("cpu").and_then(|n| n.parse::<usize>().ok()) else { continue };
        let v: Vec<f64> = w.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 7 {
            continue;
        }
        // user nice system idle iowait irq softirq steal ...
        let total: f64 = v.iter().take(8).sum();
        let busy = total - v[3] - v[4];
        if out.len() <= idx {
            out.resize(idx + 1, (0.0, 0.0));
        }
        out[idx] = (busy / hz, (v[5] + v[6]) / hz);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn voluntary_switches_come_from_their_line() {
        let status = "Name:\tpx\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t56\n";
        assert_eq!(parse_voluntary_switches(status), Some(1234));
        assert_eq!(parse_voluntary_switches("Name:\tpx\n"), None);
    }

    #[test]
    fn a_sleeping_thread_counts_its_sleeps() {
        let pid = std::process::id();
        let sleeper = std::thread::Builder::new()
            .name("px-sleeper".into())
            .spawn(|| {
                for _ in 0..5 {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(thread_sleeps(pid, "px-sleeper").unwrap() >= 5);
        assert_eq!(thread_sleeps(pid, "px-nobody"), Some(0));
        sleeper.join().unwrap();
    }

    use super::*;

    #[test]
    fn a_softirq_count_is_read_by_row_and_cpu() {
        let t = "                    CPU0       CPU1\n          HI:          1          2\n      NET_RX:     123456      789\n";
        assert_eq!(parse_softirq(t, "NET_RX", 0), Some(123_456));
        assert_eq!(parse_softirq(t, "NET_RX", 1), Some(789));
        assert_eq!(parse_softirq(t, "NET_RX", 2), None);
        assert_eq!(parse_softirq(t, "NET_TX", 0), None);
    }

    #[test]
    fn proc_stat_per_cpu() {
        let t = "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 100 0 50 1000 10 5 45 0 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 1 2\n";
        let v = parse_proc_stat(t);
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert_eq!(v.len(), 2);
        assert!((v[0].0 - 200.0 / hz).abs() < 1e-9, "{v:?}");
        assert!((v[0].1 - 50.0 / hz).abs() < 1e-9);
        assert!((v[1].0 - 27.0 / hz).abs() < 1e-9);
    }
}
