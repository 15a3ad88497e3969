//! `px lab border` (issue 30): a border of several gateways.
//!
//! - [`ecmp`]: two gateways behind the routers' ECMP, BGP and BFD across
//!   each (BIRD 2), `kill -9` of one during sha256-checked transfers both
//!   ways, and its return.
//! - [`bird`]: BIRD 2 as a lab process (per-run configuration and control
//!   socket, killed by PID).
//!
//! Every run builds its namespaces through [`crate::Topology`] and keeps
//! its files in a [`Scratch`] directory, so namespaces, daemons, gateways
//! and files are removed on every exit path (drop, panic, SIGINT/SIGTERM).

pub mod bird;
pub mod ecmp;
pub mod exchange;
pub mod imtu;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A per-run directory under the temporary directory (daemon
/// configurations, control sockets, logs), removed on drop and by the
/// signal cleanup.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// Creates `<tmp>/px-border-<what>-<pid>-<n>`.
    pub fn new(what: &str) -> Result<Scratch, String> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("px-border-{what}-{}-{n}", std::process::id()));
        crate::cleanup::register_path(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Scratch(p))
    }
}

/// Has BIRD parse `conf` (`bird -p`); Ok when BIRD is not installed
/// (the test then says it skipped).
#[cfg(test)]
pub(crate) fn bird_parses(conf: &str) -> Result<(), String> {
    let have = std::process::Command::new("sh").args(["-c", "command -v bird"]).output();
    if !have.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED bird -p: BIRD 2 is not installed (Debian package bird2)");
        return Ok(());
    }
    let dir = Scratch::new("parse")?;
    let p = dir.0.join("t.conf");
    std::fs::write(&p, conf).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("bird").arg("-p").arg("-c").arg(&p).output().map_err(|e| e.to_string())?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        crate::cleanup::unregister_path(&self.0);
    }
}

/// What `px lab border` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BorderResult {
    /// The machine and its load at the start.
    pub machine: crate::exp::Machine,
    /// The ECMP failover run.
    pub ecmp: ecmp::EcmpResult,
}

impl crate::exp::Report for BorderResult {
    fn table(&self) -> String {
        use std::fmt::Write as _;
        let e = &self.ecmp;
        let mut s = String::new();
        let _ = writeln!(s, "px lab border — two gateways behind ECMP (BIRD 2 eBGP + BFD {} ms x {})", e.bfd.0, e.bfd.1);
        let _ = writeln!(s, "{}\n", self.machine.line());
        let _ = writeln!(s, "  {:<8} {:>5} {:>12} {:>10}  {:<8}", "dir", "flow", "bytes", "stall ms", "sha256");
        for t in &e.transfers {
            let ok = if t.sent_sha256 == t.received_sha256 && !t.sent_sha256.is_empty() { "equal" } else { "DIFFER" };
            let _ = writeln!(
                s,
                "  {:<8} {:>5} {:>12} {:>10.0}  {:<8}",
                t.direction, t.flow, t.bytes, t.failover_stall_ms, ok
            );
        }
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        let _ = writeln!(s);
        let _ = writeln!(s, "  ecmp.transfers_exact        {}", e.transfers_exact);
        let _ = writeln!(
            s,
            "  ecmp.failover_ms            {:.0} (median {:.0}, {} flows stood still; kernel route lost the dead path after {} ms)",
            e.failover_ms,
            e.failover_median_ms,
            e.stalled_flows,
            opt(e.route_converged_ms, 0)
        );
        let _ = writeln!(
            s,
            "  ecmp.yield_after_failover   {} (surviving gateway, kill → restart; before the kill {})",
            opt(e.yield_after_failover, 3),
            opt(e.yield_before_failover, 3)
        );
        let _ = writeln!(
            s,
            "  ecmp.failback_ms            {:.0} ({} flows stood still after the restart)",
            e.failback_ms, e.failback_stalled_flows
        );
        let _ = writeln!(
            s,
            "  flow hash (L4, {} tuples): both directions on one gateway {:.0} % with equal seeds, {:.0} % with different seeds; {:.0} % on gw1",
            e.hash.tuples,
            e.hash.same_seed * 100.0,
            e.hash.different_seeds * 100.0,
            e.hash.on_link1 * 100.0
        );
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{LineChart, Series};
        let e = &self.ecmp;
        let series = |name: &str, f: fn(&ecmp::Sample) -> f64| Series {
            name: name.into(),
            points: e.samples.iter().map(|p| (p.t_s, f(p))).collect(),
        };
        LineChart {
            title: "Traffic per gateway across a kill -9 and a restart".into(),
            x_label: "seconds".into(),
            y_label: "Mbit/s (both directions, at the border router)".into(),
            series: vec![series("gw1", |p| p.gw1_mbps), series("gw2", |p| p.gw2_mbps)],
            y_max: None,
            markers: vec![(e.kill_at_s, "kill -9 gw1".into()), (e.restart_at_s, "gw1 restarted".into())],
            note: Some(format!(
                "{} flows each way, BFD {} ms x {}; failover {:.0} ms; {}",
                e.transfers.len() / 2,
                e.bfd.0,
                e.bfd.1,
                e.failover_ms,
                self.machine.line()
            )),
        }
        .to_svg()
    }

    fn json(&self) -> serde_json::Value {
        let e = &self.ecmp;
        serde_json::json!({
            "machine": self.machine,
            "ecmp": {
                "transfers_exact": e.transfers_exact,
                "failover_ms": e.failover_ms,
                "failover_median_ms": e.failover_median_ms,
                "stalled_flows": e.stalled_flows,
                "route_converged_ms": e.route_converged_ms,
                "yield_after_failover": e.yield_after_failover,
                "yield_before_failover": e.yield_before_failover,
                "failback_ms": e.failback_ms,
                "failback_stalled_flows": e.failback_stalled_flows,
                "hash": e.hash,
                "bfd_interval_ms": e.bfd.0,
                "bfd_multiplier": e.bfd.1,
                "kill_at_s": e.kill_at_s,
                "restart_at_s": e.restart_at_s,
                "transfers": e.transfers,
                "samples": e.samples,
            },
        })
    }
}

/// Runs `px lab border`.
pub fn run(o: &ecmp::EcmpOptions, say: &dyn Fn(&str)) -> Result<BorderResult, crate::RunError> {
    let machine = crate::exp::Machine::current();
    let ecmp = ecmp::run(o, say)?;
    Ok(BorderResult { machine, ecmp })
}
