//! `px-bench`: reproducible synthetic traces and the engine benchmark
//! behind `px bench engine` (with `--vs dpdk`: [`vs_dpdk::compare`]), and
//! the trace replay `px bench gateway` sends over px-lab's links
//! ([`replay`]).

pub mod drive;
pub mod engine_bench;
pub mod replay;
pub mod report;
pub mod scaling;
pub mod trace;
pub mod udp_trace;
pub mod vs_dpdk;

pub use engine_bench::{
    BenchConfig, RunResult, YieldComparison, YieldResult, inbound_yield, run_once, yield_comparison,
};
pub use report::{EngineReport, ScalingReport};
pub use trace::{Direction, Trace, TraceConfig};
