//! `px bench engine`: the engine on one core against a synthetic trace,
//! beside a plain `memcpy` of the same payload bytes in the same run.
//!
//! Only the engine's own work is timed: building the trace's frames is not.
//! The memcpy reference copies each frame's payload into a per-flow
//! destination buffer of the inner segment's size, as the merge path does,
//! and alternates with the engine chunk by chunk so both see the same cache
//! state on average.

use std::time::{Duration, Instant};

use px_gateway::{Config, Engine, Port};
use px_wire::offload::Checksum;

use crate::drive::{drain, feed, open_flows, open_windows};
use crate::trace::{Chunk, Direction, Trace, TraceConfig};

/// What one run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    pub merge_gbps: f64,
    pub merge_mpps: f64,
    pub split_gbps: f64,
    pub split_mpps: f64,
    /// Split with segmentation offload (header-only work: the engine hands
    /// the I/O layer one super-packet with a segment size).
    pub split_gso_gbps: f64,
    pub memcpy_gbps: f64,
    pub yield_: f64,
    /// Best yield the trace allows given its PSH positions and small flows,
    /// if PSH flushes (`--psh flush`); merging across PSH may exceed it.
    pub yield_ceiling: f64,
    pub hold_p50_us: u64,
    pub hold_p99_us: u64,
    pub inbound_packets: u64,
    pub outbound_packets: u64,
    pub merged_out: u64,
    pub flushes: Vec<(String, u64)>,
    /// UDP datagrams packed into caravans (payload Gbps), and the share of
    /// caravans sent full ([`crate::udp_trace`]).
    pub caravan_gbps: f64,
    pub caravan_yield: f64,
}

/// Parameters of the benchmark.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub inbound: TraceConfig,
    pub outbound: TraceConfig,
    pub inbound_packets: usize,
    pub outbound_packets: usize,
    pub engine: Config,
    /// How the received frames' checksums arrive (a NIC verifies them).
    pub rx_csum: Checksum,
    pub chunk_bytes: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            inbound: TraceConfig::inbound_default(),
            outbound: TraceConfig::outbound_default(),
            inbound_packets: 1_000_000,
            outbound_packets: 150_000,
            engine: Config { max_flows: 1 << 16, ..Config::default() },
            rx_csum: Checksum::Valid,
            chunk_bytes: 48 << 20,
        }
    }
}

/// Inner MSS for the trace's header layout (IPv4 + TCP with timestamps).
fn inner_mss(cfg: &Config) -> usize {
    cfg.imtu as usize - 20 - 32
}

pub(crate) struct DirResult {
    pub(crate) payload: u64,
    packets: u64,
    pub(crate) engine: Duration,
    memcpy: Duration,
    counters: px_gateway::Counters,
    ceiling: f64,
}

pub(crate) fn run_direction(
    tc: &TraceConfig,
    packets: usize,
    ecfg: &Config,
    rx_csum: Checksum,
    chunk_bytes: usize,
    with_memcpy: bool,
) -> DirResult {
    let mut engine = Engine::new(ecfg.clone()).expect("benchmark engine configuration is valid");
    let mss = inner_mss(ecfg);
    let mut trace = Trace::new(tc.clone(), mss);
    let from = match tc.direction {
        Direction::Inbound => Port::Outer,
        Direction::Outbound => Port::Inner,
    };
    // Each side announces its link's MSS; the trace's segments come from the sender's.
    let (inner, outer) = (ecfg.imtu - 40, ecfg.emtu - 40);
    let (sender, receiver) = if from == Port::Outer { (outer, inner) } else { (inner, outer) };
    let [mut syns, mut synacks] = trace.handshakes(sender, receiver);
    open_flows(&mut engine, [&mut syns, &mut synacks], from, rx_csum);
    let mut chunk = Chunk::default();
    let mut sinks: Vec<Vec<u8>> = if with_memcpy { vec![vec![0u8; mss]; tc.flows + 512] } else { Vec::new() };
    let mut fill_at: Vec<usize> = vec![0; sinks.len()];
    let base = Instant::now();
    let (mut engine_time, mut memcpy_time) = (Duration::ZERO, Duration::ZERO);
    let (mut done, mut payload, mut sent) = (0usize, 0u64, 0u64);
    let mut last_ns = 0;
    let mut round = 0;
    while done < packets {
        trace.fill(&mut chunk, packets - done, chunk_bytes);
        if from == Port::Outer {
            open_windows(&mut engine, &chunk, from, rx_csum, base);
        }
        done += chunk.frames.len();
        payload += chunk.payload_bytes;
        let memcpy_first = round % 2 == 1;
        round += 1;
        let mut copy = |chunk: &Chunk| {
            let t0 = Instant::now();
            for f in &chunk.frames {
                let p = &chunk.data[f.offset + f.payload_at as usize..f.offset + f.len];
                let k = f.flow as usize % sinks.len();
                let at = if fill_at[k] + p.len() > mss { 0 } else { fill_at[k] };
                sinks[k][at..at + p.len()].copy_from_slice(p);
                fill_at[k] = at + p.len();
            }
            t0.elapsed()
        };
        if with_memcpy && memcpy_first {
            memcpy_time += copy(&chunk);
        }
        let t0 = Instant::now();
        sent += feed(&mut engine, &mut chunk, from, rx_csum, base);
        engine_time += t0.elapsed();
        last_ns = chunk.frames.last().map_or(last_ns, |f| f.t_ns);
        if with_memcpy && !memcpy_first {
            memcpy_time += copy(&chunk);
        }
    }
    engine.flush_all(base + Duration::from_nanos(last_ns) + ecfg.merge_timeout);
    sent += drain(&mut engine);
    std::hint::black_box(sent);
    std::hint::black_box(&sinks);
    DirResult {
        payload,
        packets: done as u64,
        engine: engine_time,
        memcpy: memcpy_time,
        counters: engine.counters().clone(),
        ceiling: trace.ceiling.yield_bound(),
    }
}

/// The merge's yield and hold times on an inbound trace, untimed: they are
/// functions of the trace and the engine configuration only (trace time,
/// not wall time), so they are the same on a loaded machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct YieldResult {
    pub yield_: f64,
    pub yield_ceiling: f64,
    pub hold_p50_us: u64,
    pub hold_p99_us: u64,
    /// Early flushes by reason (holds sent before they were full).
    pub flushes: Vec<(String, u64)>,
    /// Data packets sent inner, and those of flows never merged (small).
    pub data_out: u64,
}

/// Replays `cfg`'s inbound trace through an engine configured as `engine`.
pub fn inbound_yield(cfg: &BenchConfig, inbound: &TraceConfig, engine: &Config) -> YieldResult {
    let r = run_direction(inbound, cfg.inbound_packets, engine, cfg.rx_csum, cfg.chunk_bytes, false);
    let c = &r.counters;
    YieldResult {
        yield_: c.conversion_yield(),
        yield_ceiling: r.ceiling,
        hold_p50_us: c.hold.quantile_upper_us(0.5),
        hold_p99_us: c.hold.quantile_upper_us(0.99),
        flushes: px_gateway::FlushReason::ALL.iter().map(|r| (r.name().to_string(), c.flushes(*r))).collect(),
        data_out: c.inner_tcp_data_out,
    }
}

/// The yields issue 11 asks for beside the default: the same trace without
/// small flows, and the same trace under the first round's flush-on-PSH.
#[derive(Debug, Clone, serde::Serialize)]
pub struct YieldComparison {
    pub small_share_0: YieldResult,
    pub flush_policy: YieldResult,
}

pub fn yield_comparison(cfg: &BenchConfig) -> YieldComparison {
    let no_small = TraceConfig { small_share: 0.0, ..cfg.inbound.clone() };
    let flush = Config { psh: px_gateway::PshPolicy::Flush, ..cfg.engine.clone() };
    YieldComparison {
        small_share_0: inbound_yield(cfg, &no_small, &cfg.engine),
        flush_policy: inbound_yield(cfg, &cfg.inbound, &flush),
    }
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 * 8.0 / d.as_secs_f64().max(1e-12) / 1e9
}

/// One run of the whole benchmark: merge, split (software and GSO), memcpy.
pub fn run_once(cfg: &BenchConfig) -> RunResult {
    let inb = run_direction(&cfg.inbound, cfg.inbound_packets, &cfg.engine, cfg.rx_csum, cfg.chunk_bytes, true);
    let soft = Config { outer_gso: false, ..cfg.engine.clone() };
    let out = run_direction(&cfg.outbound, cfg.outbound_packets, &soft, cfg.rx_csum, cfg.chunk_bytes, false);
    let gso = Config { outer_gso: true, ..cfg.engine.clone() };
    let out_gso = run_direction(&cfg.outbound, cfg.outbound_packets, &gso, cfg.rx_csum, cfg.chunk_bytes, false);
    let udp = crate::udp_trace::UdpTraceConfig { packets: cfg.inbound_packets / 2, ..Default::default() };
    let car = crate::udp_trace::run_caravans(&udp, &cfg.engine, cfg.chunk_bytes);
    let c = &inb.counters;
    RunResult {
        merge_gbps: gbps(inb.payload, inb.engine),
        merge_mpps: inb.packets as f64 / inb.engine.as_secs_f64() / 1e6,
        split_gbps: gbps(out.payload, out.engine),
        split_mpps: out.packets as f64 / out.engine.as_secs_f64() / 1e6,
        split_gso_gbps: gbps(out_gso.payload, out_gso.engine),
        memcpy_gbps: gbps(inb.payload, inb.memcpy),
        yield_: c.conversion_yield(),
        yield_ceiling: inb.ceiling,
        hold_p50_us: c.hold.quantile_upper_us(0.5),
        hold_p99_us: c.hold.quantile_upper_us(0.99),
        inbound_packets: inb.packets,
        outbound_packets: out.packets,
        merged_out: c.merged_out,
        flushes: px_gateway::FlushReason::ALL.iter().map(|r| (r.name().to_string(), c.flushes(*r))).collect(),
        caravan_gbps: car.gbps,
        caravan_yield: car.caravan_yield,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run must merge, split and account: the numbers are measured,
    /// so only their consistency is asserted here, not their size.
    #[test]
    fn small_run_is_consistent() {
        let cfg = BenchConfig {
            inbound: TraceConfig { flows: 16, ..TraceConfig::inbound_default() },
            outbound: TraceConfig { flows: 16, ..TraceConfig::outbound_default() },
            inbound_packets: 20_000,
            outbound_packets: 2_000,
            chunk_bytes: 4 << 20,
            ..BenchConfig::default()
        };
        let r = run_once(&cfg);
        assert_eq!(r.inbound_packets, 20_000);
        assert!(r.merged_out > 0 && r.merged_out < 20_000);
        assert!(r.yield_ > 0.5, "yield {}", r.yield_);
        assert!(r.merge_gbps > 0.0 && r.split_gbps > 0.0 && r.memcpy_gbps > 0.0);
        let bound = px_gateway::DEFAULT_MERGE_TIMEOUT.as_micros() as u64 * 9 / 8 + 1;
        assert!(r.hold_p99_us <= bound, "holds bounded by the merge timeout (+ bucket width): {}", r.hold_p99_us);
        // Untimed replays are deterministic, and agree with the timed run.
        let y = inbound_yield(&cfg, &cfg.inbound, &cfg.engine);
        assert_eq!(y.yield_, r.yield_);
        let c = yield_comparison(&cfg);
        assert_eq!(c.small_share_0.yield_, yield_comparison(&cfg).small_share_0.yield_);
        assert!(c.flush_policy.yield_ <= r.yield_ + 1e-9, "flush {} adaptive {}", c.flush_policy.yield_, r.yield_);
        // The trace's ceiling is that of flush-on-PSH (adaptive PSH merges
        // across PSH and may exceed it).
        let f = c.flush_policy;
        assert!(f.yield_ <= f.yield_ceiling + 1e-9, "flush {} ceiling {}", f.yield_, f.yield_ceiling);
    }

    /// Issue 11's yield on the default trace (800 flows, PSH per 128 KiB
    /// write, TSecr every millisecond, 0.5 % small flows), run in release
    /// (`cargo test --release -p px-bench -- --ignored yield_table`), which
    /// also prints the merge-timeout table of docs/merge.md.
    #[test]
    #[ignore = "1 M packets per row: run in release"]
    fn yield_table() {
        let mut base = BenchConfig::default();
        if let Some(n) = std::env::var("PX_YIELD_PACKETS").ok().and_then(|v| v.parse().ok()) {
            base.inbound_packets = n;
        }
        println!("timeout_us  psh       small  yield   ceiling  hold_p50  hold_p99");
        let only: Option<u64> = std::env::var("PX_YIELD_TIMEOUT").ok().and_then(|v| v.parse().ok());
        for us in [32u64, 64, 100, 200, 300, 500, 600, 700] {
            if only.is_some_and(|o| o != us) {
                continue;
            }
            for psh in [px_gateway::PshPolicy::Adaptive, px_gateway::PshPolicy::Flush] {
                for small in [0.005, 0.0] {
                    let engine = Config { merge_timeout: Duration::from_micros(us), psh, ..base.engine.clone() };
                    let inbound = TraceConfig { small_share: small, ..base.inbound.clone() };
                    let y = inbound_yield(&base, &inbound, &engine);
                    println!(
                        "{us:>10}  {:<8}  {small:<5}  {:.4}  {:.4}   {:>8}  {:>8}",
                        format!("{psh:?}").to_lowercase(),
                        y.yield_,
                        y.yield_ceiling,
                        y.hold_p50_us,
                        y.hold_p99_us
                    );
                    let f: Vec<_> = y.flushes.iter().filter(|(_, n)| *n > 0).collect();
                    println!("            out {} flushes {f:?}", y.data_out);
                }
            }
        }
        // Issue 11 asks 0.97 with 0.5 % small flows; their packets are never
        // merged and are ~2.5 % of the packets out, so that is out of reach
        // (docs/merge.md); the bulk flows alone must reach it.
        let no_small = TraceConfig { small_share: 0.0, ..base.inbound.clone() };
        let y = inbound_yield(&base, &no_small, &base.engine);
        assert!(y.yield_ >= 0.97, "yield of the bulk flows {}", y.yield_);
    }
}
