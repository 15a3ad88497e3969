//! What `px bench engine` prints: the median and range over runs of every
//! figure of the one-core benchmark ([`EngineReport`]) and of the scaling
//! run ([`ScalingReport`]), as a table or as the JSON of `--json`. Every
//! figure was timed in the run that made the report; yields and hold times
//! are functions of the trace (trace time), so they come from one untimed
//! replay each.

use std::fmt::Write as _;

use px_wire::offload::Checksum;
use serde_json::json;

use crate::scaling::ScalingResult;
use crate::vs_dpdk::Spread;
use crate::{BenchConfig, RunResult, YieldComparison, run_once, yield_comparison};

/// A figure of a run: its JSON key, its table label and how to read it.
type Metric<R> = (&'static str, &'static str, fn(&R) -> f64);

const ENGINE_METRICS: [Metric<RunResult>; 12] = [
    ("merge_gbps", "merge throughput (TCP payload, Gbps)", |r| r.merge_gbps),
    ("merge_mpps", "merge packet rate (Mpps in)", |r| r.merge_mpps),
    ("split_gbps", "split throughput, software (Gbps)", |r| r.split_gbps),
    ("split_mpps", "split packet rate (Mpps in)", |r| r.split_mpps),
    ("split_gso_gbps", "split throughput, GSO hand-off (Gbps)", |r| r.split_gso_gbps),
    ("memcpy_gbps", "memcpy of the same payload (Gbps)", |r| r.memcpy_gbps),
    ("merge_vs_memcpy", "merge / memcpy", |r| r.merge_gbps / r.memcpy_gbps),
    ("yield", "conversion yield", |r| r.yield_),
    ("yield_ceiling", "yield ceiling if PSH flushed (PSH, small flows)", |r| r.yield_ceiling),
    ("caravan_gbps", "UDP caravan packing (payload Gbps)", |r| r.caravan_gbps),
    ("caravan_yield", "caravan yield (share sent full)", |r| r.caravan_yield),
    ("hold_p99_us", "hold time p99 (µs, trace time)", |r| r.hold_p99_us as f64),
];

const SCALING_METRICS: [Metric<ScalingResult>; 6] = [
    ("merge_gbps_1", "merge, 1 thread (Gbps)", |r| r.merge_gbps_1),
    ("merge_gbps_n", "merge, N threads (Gbps, all together)", |r| r.merge_gbps_n),
    ("merge_scaling", "merge scaling (N threads / 1)", |r| r.merge_scaling()),
    ("split_gbps_1", "split (software), 1 thread (Gbps)", |r| r.split_gbps_1),
    ("split_gbps_n", "split (software), N threads (Gbps)", |r| r.split_gbps_n),
    ("split_scaling", "split scaling (N threads / 1)", |r| r.split_scaling()),
];

fn spread<R>(runs: &[R], f: &dyn Fn(&R) -> f64) -> Spread {
    Spread::of(runs.iter().map(f).collect())
}

/// The one-core benchmark: every run, and the yield comparisons.
#[derive(Debug, Clone)]
pub struct EngineReport {
    pub cfg: BenchConfig,
    pub runs: Vec<RunResult>,
    pub cmp: YieldComparison,
}

impl EngineReport {
    /// Runs the benchmark `runs` times (`before_run(i)` ahead of run `i`),
    /// then the untimed yield comparisons.
    pub fn measure(cfg: &BenchConfig, runs: u32, before_run: &dyn Fn(u32)) -> EngineReport {
        let runs = (0..runs)
            .map(|i| {
                before_run(i);
                run_once(cfg)
            })
            .collect();
        EngineReport { cfg: cfg.clone(), runs, cmp: yield_comparison(cfg) }
    }

    /// How received checksums arrived, as the flag names it.
    fn rx_csum(&self) -> &'static str {
        if self.cfg.rx_csum == Checksum::Valid { "Verified" } else { "Unverified" }
    }

    /// The JSON of `--json`: each figure's median, the yield comparisons,
    /// the setup and every run.
    pub fn json(&self) -> serde_json::Value {
        let (c, e) = (&self.cfg, &self.cfg.engine);
        let mut obj = serde_json::Map::new();
        for (k, _, f) in &ENGINE_METRICS {
            obj.insert((*k).into(), json!(spread(&self.runs, f).median));
        }
        obj.insert("hold_p50_us".into(), json!(spread(&self.runs, &|r: &RunResult| r.hold_p50_us as f64).median));
        obj.insert("yield_small_share_0".into(), json!(self.cmp.small_share_0.yield_));
        obj.insert("yield_flush_policy".into(), json!(self.cmp.flush_policy.yield_));
        obj.insert("hold_p99_us_flush_policy".into(), json!(self.cmp.flush_policy.hold_p99_us));
        obj.insert(
            "setup".into(),
            json!({
                "cores": 1, "flows": c.inbound.flows, "inbound_packets": c.inbound_packets,
                "outbound_packets": c.outbound_packets,
                "segment_in": e.emtu - 52, "segment_out": e.imtu - 52, "imtu": e.imtu, "emtu": e.emtu,
                "merge_timeout_us": e.merge_timeout.as_micros() as u64, "write_size": c.inbound.write_size,
                "small_share": c.inbound.small_share, "rate_gbps": [c.inbound.rate_gbps.0, c.inbound.rate_gbps.1],
                "chunk_kib": c.chunk_bytes / 1024, "rx_csum": self.rx_csum().to_lowercase(),
                "psh": format!("{:?}", e.psh).to_lowercase(), "runs": self.runs.len(), "seed": c.inbound.seed,
                "statistic": "median over runs"
            }),
        );
        obj.insert("runs".into(), json!(self.runs));
        serde_json::Value::Object(obj)
    }

    /// The table: median [min – max] of each figure.
    pub fn table(&self) -> String {
        let (c, e) = (&self.cfg, &self.cfg.engine);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "px bench engine — 1 core, {} flows, {} B segments in / {} B out, iMTU {} / eMTU {}, merge timeout {} µs,\n\
             writes of {} B (PSH each, PSH {:?}), {:.1} % small-flow packets, rx checksums {}, {} run(s): median [min – max]\n",
            c.inbound.flows,
            e.emtu - 52,
            e.imtu - 52,
            e.imtu,
            e.emtu,
            e.merge_timeout.as_micros(),
            c.inbound.write_size,
            e.psh,
            c.inbound.small_share * 100.0,
            self.rx_csum(),
            self.runs.len()
        );
        for (_, label, f) in &ENGINE_METRICS {
            let m = spread(&self.runs, f);
            let _ = writeln!(s, "  {label:<48} {:>9.3}   [{:.3} – {:.3}]", m.median, m.min, m.max);
        }
        let _ = writeln!(
            s,
            "  {:<48} {:>9.3}\n  {:<48} {:>9.3}",
            "conversion yield, same trace with --small-share 0",
            self.cmp.small_share_0.yield_,
            "conversion yield, same trace with --psh flush",
            self.cmp.flush_policy.yield_
        );
        let last = self.runs.last().map(|r| r.flushes.clone()).unwrap_or_default();
        let flushes: Vec<String> = last.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
        let flushes = if flushes.is_empty() { "none".into() } else { flushes.join(", ") };
        let _ = writeln!(s, "\n  early flushes (last run): {flushes}");
        s
    }
}

/// The scaling run: merge and split on 1 thread and on `threads`.
#[derive(Debug, Clone)]
pub struct ScalingReport {
    pub cfg: BenchConfig,
    pub threads: usize,
    pub runs: Vec<ScalingResult>,
    /// `/proc/loadavg` after the runs.
    pub loadavg: String,
}

impl ScalingReport {
    /// The JSON of `--json`: each figure's median and range, the setup.
    pub fn json(&self) -> serde_json::Value {
        let (c, n) = (&self.cfg, self.threads);
        let mut obj = serde_json::Map::new();
        for (k, _, f) in &SCALING_METRICS {
            let m = spread(&self.runs, f);
            obj.insert((*k).into(), json!(m.median));
            obj.insert(format!("{k}_range"), json!([m.min, m.max]));
        }
        obj.insert(
            "setup".into(),
            json!({
                "threads": n, "cpus": (0..n).collect::<Vec<_>>(), "flows": c.inbound.flows,
                "inbound_packets": c.inbound_packets, "outbound_packets": c.outbound_packets,
                "runs": self.runs.len(), "statistic": "median over runs", "loadavg": self.loadavg,
            }),
        );
        serde_json::Value::Object(obj)
    }

    /// The table: median [min – max] of each figure.
    pub fn table(&self) -> String {
        let n = self.threads;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "px bench engine --threads {n} — {} flows divided among {n} threads (CPUs 0..{}), the same work on 1 thread \
             as the reference; {} run(s), load {}: median [min – max]\n",
            self.cfg.inbound.flows,
            n - 1,
            self.runs.len(),
            self.loadavg
        );
        for (_, label, f) in &SCALING_METRICS {
            let m = spread(&self.runs, f);
            let _ = writeln!(s, "  {label:<44} {:>9.3}   [{:.3} – {:.3}]", m.median, m.min, m.max);
        }
        s
    }
}
