//! One fixed pass of the engine over the 800-flow trace, for counting
//! instructions: `valgrind --tool=callgrind` on a release build of this
//! example gives a figure that is the same run after run, whatever else the
//! machine does (this VM has no PMU, and wall-clock times on it are noise).
//! Merge: the inbound trace's bulk flows, opened by their handshakes first;
//! split: the outbound trace, cut in software. Both go through the loop
//! every engine benchmark uses ([`px_bench::drive::feed`]). Prints what the
//! engine sent, so that two builds can be checked to do the same work.
//!
//! `cargo build --release -p px-bench --example engine_instructions`, then
//! `valgrind --tool=callgrind target/release/examples/engine_instructions`.

use std::time::{Duration, Instant};

use px_bench::drive::{feed, open_flows};
use px_bench::trace::{Chunk, Trace, TraceConfig};
use px_gateway::{Config, Engine, Port};
use px_wire::offload::Checksum;

/// Feeds `packets` frames of the trace `cfg` to a new engine from `from`,
/// after the flows' handshakes; returns the bytes sent and segments merged.
fn pass(cfg: TraceConfig, from: Port, packets: usize, engine_cfg: Config) -> (u64, u64) {
    let mut t = Trace::new(cfg, 8948);
    let [mut syns, mut synacks] = t.handshakes(1460, 8960);
    let mut c = Chunk::default();
    t.fill(&mut c, packets, usize::MAX);
    let mut e = Engine::new(engine_cfg).expect("the default configuration is valid");
    open_flows(&mut e, [&mut syns, &mut synacks], from, Checksum::Valid);
    let base = Instant::now();
    let sent = feed(&mut e, &mut c, from, Checksum::Valid, base);
    e.flush_all(base + Duration::from_secs(3600));
    (sent, e.counters().merged_out)
}

fn main() {
    let inbound = TraceConfig { small_share: 0.0, ..TraceConfig::inbound_default() };
    let merge = pass(inbound, Port::Outer, 200_000, Config::default());
    let software_split = Config { outer_gso: false, ..Config::default() };
    let split = pass(TraceConfig::outbound_default(), Port::Inner, 30_000, software_split);
    println!("merge: {} bytes sent, {} merged; split: {} bytes sent", merge.0, merge.1, split.0);
}
