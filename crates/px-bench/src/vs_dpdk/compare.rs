//! The experiment of `px bench engine --vs dpdk`: the engine and DPDK
//! 22.11's GRO/GSO on the same frames, alternating run by run, both pinned
//! to one CPU (ours through the caller's `pin`, the harness with `taskset`
//! and EAL `-l`).
//!
//! Without DPDK the engine side still runs and the DPDK side is reported
//! absent with the reason ([`Comparison::absent`]; in the JSON,
//! `"dpdk": null` and `dpdk_absent`). Every figure in a [`Comparison`] was
//! timed in this run; the order alternates (px first on even runs, DPDK
//! first on odd ones) so that neither always inherits the other's cache.

use std::fmt::Write as _;
use std::path::PathBuf;

use px_gateway::{Config, Port};
use px_wire::offload::Checksum;
use serde_json::json;

use super::{DPDK_SEMANTICS, DpdkRun, HarnessArgs, SideRun, Spread};
use crate::BenchConfig;
use crate::trace::Chunk;

/// Inbound packets the comparison holds in memory at most (the harness
/// reads whole pcaps).
pub const MAX_IN: usize = 300_000;
/// Outbound packets it holds at most.
pub const MAX_OUT: usize = 30_000;

/// Why the comparison could not run (the DPDK side being absent is not an
/// error: see [`Comparison::absent`]).
#[derive(Debug)]
pub enum CompareError {
    /// The configuration asks the engine to verify received checksums,
    /// which the harness never does: the two sides would not do the same work.
    ChecksumsNotVerified,
    /// The directory for the pcaps could not be created.
    PcapDir {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The engine's thread could not be pinned to the CPU.
    Pin {
        /// The CPU.
        cpu: usize,
        /// Why not.
        reason: String,
    },
}

impl std::fmt::Display for CompareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompareError::ChecksumsNotVerified => {
                f.write_str("--vs dpdk: the harness takes received checksums as verified; use --rx-csum verified")
            }
            CompareError::PcapDir { dir, source } => write!(f, "{}: {source}", dir.display()),
            // The pinning function's own message names the CPU.
            CompareError::Pin { reason, .. } => f.write_str(reason),
        }
    }
}

impl std::error::Error for CompareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CompareError::PcapDir { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// One engine run of the comparison: merge, software split and the yield.
#[derive(Debug, Clone, Copy)]
pub struct PxRun {
    pub merge: SideRun,
    pub split: SideRun,
    pub yield_: f64,
}

/// What the comparison measured, with its setting.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The CPU both sides ran on.
    pub cpu: usize,
    /// Runs of each side.
    pub runs: u32,
    /// Bulk flows of the trace.
    pub flows: usize,
    /// Inbound and outbound frames used (at most [`MAX_IN`], [`MAX_OUT`]).
    pub inbound_packets: usize,
    pub outbound_packets: usize,
    /// TCP payload of the inbound and outbound frames.
    pub inbound_payload_bytes: u64,
    pub outbound_payload_bytes: u64,
    /// The engine's configuration (MTUs, hold time).
    pub engine: Config,
    pub px_runs: Vec<PxRun>,
    /// Empty when the DPDK side is absent.
    pub dpdk_runs: Vec<DpdkRun>,
    /// Why the DPDK side is absent (not built here, or a run failed).
    pub absent: Option<String>,
}

/// Runs the comparison `runs` times on `cpu`, the calling thread pinned
/// there with `pin` once the frames and the harness are ready; `say` gets
/// a line of progress at each step.
pub fn run(
    cfg: &BenchConfig,
    runs: u32,
    cpu: usize,
    pin: &dyn Fn(usize) -> Result<(), String>,
    say: &dyn Fn(&str),
) -> Result<Comparison, CompareError> {
    if cfg.rx_csum != Checksum::Valid {
        return Err(CompareError::ChecksumsNotVerified);
    }
    let (n_in, n_out) = (cfg.inbound_packets.min(MAX_IN), cfg.outbound_packets.min(MAX_OUT));
    let (imtu, emtu) = (cfg.engine.imtu, cfg.engine.emtu);
    say(&format!("generating {n_in} inbound + {n_out} outbound frames…"));
    let inbound = super::trace_frames(&cfg.inbound, n_in, imtu, emtu);
    let outbound = super::trace_frames(&cfg.outbound, n_out, imtu, emtu);
    let (repo, target) = super::repo_and_target();
    let dir = target.join("dpdk");
    std::fs::create_dir_all(&dir).map_err(|source| CompareError::PcapDir { dir: dir.clone(), source })?;
    let (gro_pcap, gso_pcap) = (dir.join("px-bench-inbound.pcap"), dir.join("px-bench-outbound.pcap"));
    // The DPDK side: build (or find) the harness and write the pcaps.
    let harness = super::harness(&repo, &target).and_then(|exe| {
        say(&format!("harness {}", exe.display()));
        super::write_pcap(&gro_pcap, &inbound.data).map_err(|e| format!("{}: {e}", gro_pcap.display()))?;
        super::write_pcap(&gso_pcap, &outbound.data).map_err(|e| format!("{}: {e}", gso_pcap.display()))?;
        Ok(exe)
    });
    let mut absent = harness.as_ref().err().cloned();
    if let Some(r) = &absent {
        say(&format!("DPDK side absent: {r}"));
    }
    pin(cpu).map_err(|reason| CompareError::Pin { cpu, reason })?;
    let soft = Config { outer_gso: false, ..cfg.engine.clone() };
    let mut work = Chunk::default();
    let (mut px_runs, mut dpdk_runs): (Vec<PxRun>, Vec<DpdkRun>) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let mut ours = || {
            let (merge, c) = super::engine_run(&inbound, &mut work, Port::Outer, &cfg.engine, cfg.rx_csum);
            let (split, _) = super::engine_run(&outbound, &mut work, Port::Inner, &soft, cfg.rx_csum);
            px_runs.push(PxRun { merge, split, yield_: c.conversion_yield() });
        };
        // Alternate who goes first, so neither always inherits the other's cache.
        if i % 2 == 0 {
            ours();
        }
        if let (Ok(exe), None) = (&harness, &absent) {
            let h = HarnessArgs {
                exe,
                gro_pcap: &gro_pcap,
                gso_pcap: &gso_pcap,
                lcore: cpu,
                hold_us: cfg.engine.merge_timeout.as_micros() as u64,
                mtu: cfg.engine.emtu,
                imtu: cfg.engine.imtu,
            };
            match super::dpdk_run(&h) {
                Ok(r) => dpdk_runs.push(r),
                Err(e) => {
                    say(&format!("DPDK side failed: {e}"));
                    absent = Some(e);
                }
            }
        }
        if i % 2 == 1 {
            ours();
        }
        say(&format!("run {}/{} done", i + 1, runs));
    }
    if absent.is_none() {
        let _ = std::fs::remove_file(&gro_pcap);
        let _ = std::fs::remove_file(&gso_pcap);
    }
    Ok(Comparison {
        cpu,
        runs,
        flows: cfg.inbound.flows,
        inbound_packets: n_in,
        outbound_packets: n_out,
        inbound_payload_bytes: inbound.data.payload_bytes,
        outbound_payload_bytes: outbound.data.payload_bytes,
        engine: cfg.engine.clone(),
        px_runs,
        dpdk_runs,
        absent,
    })
}

impl Comparison {
    /// Whether the DPDK side ran.
    pub fn dpdk_ran(&self) -> bool {
        self.absent.is_none()
    }

    fn px(&self, f: fn(&PxRun) -> f64) -> Spread {
        Spread::of(self.px_runs.iter().map(f).collect())
    }

    fn dp(&self, f: fn(&DpdkRun) -> f64) -> Spread {
        Spread::of(self.dpdk_runs.iter().map(f).collect())
    }

    /// The JSON of `--json`: medians, spreads, every run, the setting.
    pub fn json(&self) -> serde_json::Value {
        let (pm, ps, py) = (self.px(|r| r.merge.gbps), self.px(|r| r.split.gbps), self.px(|r| r.yield_));
        let (pm_pps, ps_pps) = (self.px(|r| r.merge.mpps), self.px(|r| r.split.mpps));
        let dpdk = self.dpdk_ran().then(|| {
            let (dm, ds) = (self.dp(|r| r.merge.gbps), self.dp(|r| r.split.gbps));
            let nocsum = |s: &SideRun, c: f64| s.gbps * s.seconds / (s.seconds - c).max(1e-12);
            let runs = &self.dpdk_runs;
            let last = runs.last().expect("at least one run");
            json!({
                "dpdk_merge_gbps": dm.median, "dpdk_split_gbps": ds.median,
                "dpdk_merge_mpps": self.dp(|r| r.merge.mpps).median, "dpdk_split_mpps": self.dp(|r| r.split.mpps).median,
                "dpdk_yield": self.dp(|r| r.merge_yield).median,
                "dpdk_merge_gbps_spread": dm, "dpdk_split_gbps_spread": ds,
                "dpdk_merge_gbps_without_csum": runs.iter().map(|r| nocsum(&r.merge, r.merge_csum_seconds)).collect::<Vec<_>>(),
                "dpdk_split_gbps_without_csum": runs.iter().map(|r| nocsum(&r.split, r.split_csum_seconds)).collect::<Vec<_>>(),
                "merge_ratio": pm.median / dm.median, "split_ratio": ps.median / ds.median,
                "dpdk_version": last.dpdk_version, "dpdk_merge_out_max_ip_len": last.merge_out_max_ip_len,
                "dpdk_merge_out_of_order": last.merge_out_of_order, "dpdk_split_out_max_ip_len": last.split_out_max_ip_len,
                "dpdk_runs": runs,
            })
        });
        let e = &self.engine;
        let setup = json!({
            "cpu": self.cpu, "runs": self.runs, "flows": self.flows, "inbound_packets": self.inbound_packets,
            "outbound_packets": self.outbound_packets,
            "inbound_payload_bytes": self.inbound_payload_bytes, "outbound_payload_bytes": self.outbound_payload_bytes,
            "imtu": e.imtu, "emtu": e.emtu, "hold_us": e.merge_timeout.as_micros() as u64,
            "rx_csum": "verified (both sides: NIC CHECKSUM_UNNECESSARY)",
            "handshakes": "px is handed each bulk flow's SYN and SYN-ACK first, untimed (it merges toward an inner host only once it knows that host's MSS); the pcaps carry the data frames only",
            "timed": "px: handle_packet + timers + drain + final flush over the whole trace, checksums completed inline; \
                      dpdk: rte_gro_reassemble + timeout flushes + re-segmentation to the iMTU + checksum recomputation \
                      (gro), rte_gso_segment + checksum recomputation (gso); loading frames is untimed on both sides",
            "order": "alternating: px first on even runs, DPDK first on odd runs",
            "statistic": "median over runs, spread = [min, max]",
        });
        let mut o = json!({
            "px_merge_gbps": pm.median, "px_split_gbps": ps.median,
            "px_merge_mpps": pm_pps.median, "px_split_mpps": ps_pps.median, "px_yield": py.median,
            "px_merge_gbps_spread": pm, "px_split_gbps_spread": ps,
            "px_runs": self.px_runs.iter().map(|r| json!({"merge": r.merge, "split": r.split, "yield": r.yield_})).collect::<Vec<_>>(),
            "dpdk_semantics": DPDK_SEMANTICS, "setup": setup, "dpdk": dpdk.is_some(), "runs": self.runs,
        });
        match (&dpdk, o.as_object_mut()) {
            (Some(serde_json::Value::Object(d)), Some(m)) => m.extend(d.clone()),
            (_, Some(m)) => {
                m.insert("dpdk".into(), serde_json::Value::Null);
                m.insert("dpdk_absent".into(), json!(self.absent));
            }
            _ => {}
        }
        o
    }

    /// The table: median and range of each figure, both sides.
    pub fn table(&self) -> String {
        let e = &self.engine;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "px bench engine --vs dpdk — CPU {}, {} flows, {} inbound ({} B) + {} outbound ({} B) frames, \
             iMTU {} / eMTU {}, hold {} µs, {} run(s) alternating: median [min – max]\n",
            self.cpu,
            self.flows,
            self.inbound_packets,
            e.emtu - 52,
            self.outbound_packets,
            e.imtu as usize - 52,
            e.imtu,
            e.emtu,
            e.merge_timeout.as_micros(),
            self.runs
        );
        let mut row = |label: &str, v: Spread| {
            let _ = writeln!(s, "  {label:<40} {:>9.3}   [{:.3} – {:.3}]", v.median, v.min, v.max);
        };
        let (pm, ps) = (self.px(|r| r.merge.gbps), self.px(|r| r.split.gbps));
        row("px merge (Gbps of TCP payload)", pm);
        row("px merge (Mpps in)", self.px(|r| r.merge.mpps));
        row("px split, software (Gbps)", ps);
        row("px split (Mpps in)", self.px(|r| r.split.mpps));
        row("px yield", self.px(|r| r.yield_));
        match &self.absent {
            None => {
                row("DPDK GRO merge (Gbps)", self.dp(|r| r.merge.gbps));
                row("DPDK GRO merge (Mpps in)", self.dp(|r| r.merge.mpps));
                row("DPDK GSO split (Gbps)", self.dp(|r| r.split.gbps));
                row("DPDK GSO split (Mpps in)", self.dp(|r| r.split.mpps));
                row("DPDK yield", self.dp(|r| r.merge_yield));
                let (dm, ds) = (self.dp(|r| r.merge.gbps).median, self.dp(|r| r.split.gbps).median);
                let _ =
                    writeln!(s, "\n  merge ratio px / DPDK {:.2}×, split ratio {:.2}×", pm.median / dm, ps.median / ds);
            }
            Some(why) => {
                let _ = writeln!(s, "\n  DPDK side absent: {why}");
            }
        }
        let _ = writeln!(s, "\n  DPDK semantics: {DPDK_SEMANTICS}");
        s
    }
}
