//! `px bench engine --threads N`: how the engine scales with cores.
//!
//! The gateway scales as a NIC with RSS lets it: each worker owns its own
//! engine and a share of the flows, and shares nothing with the others.
//! This runs that shape without I/O: the trace's flows are divided among N
//! threads (each its own engine, its own share of the flows, its own seed),
//! each pinned to its own CPU, all started together at a barrier. Each
//! thread runs exactly what the one-core bench runs (frames generated in
//! cache-sized chunks just before the engine reads them, only the engine
//! timed), and the aggregate rate is the sum of the threads' rates; the
//! same total work on one thread is the reference, in the same run. What
//! is shared, and so what can stop
//! the scaling, is the machine: memory bandwidth, the last-level cache, and
//! on a VM the host.

use std::sync::Barrier;

use px_gateway::Config;

use crate::engine_bench::{BenchConfig, run_direction};
use crate::trace::TraceConfig;

/// One direction on `n` threads: the sum of their rates (Gbps of TCP
/// payload, engine time only).
fn direction(
    cfg: &BenchConfig,
    tc: &TraceConfig,
    packets: usize,
    ecfg: &Config,
    n: usize,
    pin: &(dyn Fn(usize) + Sync),
) -> f64 {
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let barrier = &barrier;
                let tc =
                    TraceConfig { flows: (tc.flows / n).max(1), seed: tc.seed.wrapping_add(k as u64), ..tc.clone() };
                s.spawn(move || {
                    pin(k);
                    barrier.wait();
                    let r = run_direction(&tc, packets / n, ecfg, cfg.rx_csum, cfg.chunk_bytes, false);
                    r.payload as f64 * 8.0 / r.engine.as_secs_f64().max(1e-12) / 1e9
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("benchmark thread")).sum()
    })
}

/// Merge and split (software) on 1 thread and on `threads` threads.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScalingResult {
    pub threads: usize,
    pub merge_gbps_1: f64,
    pub merge_gbps_n: f64,
    pub split_gbps_1: f64,
    pub split_gbps_n: f64,
}

impl ScalingResult {
    pub fn merge_scaling(&self) -> f64 {
        self.merge_gbps_n / self.merge_gbps_1.max(1e-12)
    }

    pub fn split_scaling(&self) -> f64 {
        self.split_gbps_n / self.split_gbps_1.max(1e-12)
    }
}

/// One run: the same total work (the configuration's packet counts) on one
/// thread, then divided among `threads`; `pin(k)` pins the calling thread
/// to the k-th CPU.
pub fn scaling(cfg: &BenchConfig, threads: usize, pin: &(dyn Fn(usize) + Sync)) -> ScalingResult {
    let soft = Config { outer_gso: false, ..cfg.engine.clone() };
    let merge = |n| direction(cfg, &cfg.inbound, cfg.inbound_packets, &cfg.engine, n, pin);
    let split = |n| direction(cfg, &cfg.outbound, cfg.outbound_packets, &soft, n, pin);
    ScalingResult {
        threads,
        merge_gbps_1: merge(1),
        merge_gbps_n: merge(threads),
        split_gbps_1: split(1),
        split_gbps_n: split(threads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The threads divide the work and all of it is done: the figures are
    /// measured, so only that each is positive and finite is asserted.
    #[test]
    fn two_threads_run_their_shares() {
        let cfg = BenchConfig {
            inbound: TraceConfig { flows: 8, ..TraceConfig::inbound_default() },
            outbound: TraceConfig { flows: 8, ..TraceConfig::outbound_default() },
            inbound_packets: 4_000,
            outbound_packets: 400,
            chunk_bytes: 1 << 20,
            ..BenchConfig::default()
        };
        let pinned = std::sync::atomic::AtomicUsize::new(0);
        let r = scaling(&cfg, 2, &|_| {
            pinned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(r.threads, 2);
        for g in [r.merge_gbps_1, r.merge_gbps_n, r.split_gbps_1, r.split_gbps_n] {
            assert!(g.is_finite() && g > 0.0, "{r:?}");
        }
        // Every thread of every pass asked to be pinned: 1 + 2, twice.
        assert_eq!(pinned.load(std::sync::atomic::Ordering::Relaxed), 6);
    }
}
